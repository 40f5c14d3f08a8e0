"""People's labels through MLflow's UI: a review queue of a run's questions, and the answers read back.

`python -m ragexp.calibrate RUN --export N --to mlflow` puts a stratified sample of the run's judged
questions (the sample the CSV sheet holds) up for review in the run's experiment:
- one label schema per judge metric, named after the metric, on the judge's scale: a number between
  the scale's ends, and `hallucination` as pass / fail (Hallucinated / Grounded). A schema of that
  name on another scale (another judge's, in the same experiment) is left alone: the new one is
  named `metric (low-high)`;
- one review queue per export, holding the sampled questions' traces: the per-question records
  the MLflow tracker logs with every run (`ragexp.store.trace_store`).
Reviewers answer in the experiment's Review tab; each answer is a Feedback on the question's trace,
named after the schema, from a HUMAN source (the reviewer).

`--labels-from mlflow` (and `python -m ragexp.compare --labels-from mlflow`) reads those answers:
human feedback only. The judge's own feedback (LLM_JUDGE), ragexp's answer metrics (CODE), the
expected answers (expectations) and assessments later overridden are left out. Several answers of
one reviewer to one question keep the latest."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from ragexp.calibrate.labels import stratified_sample
from ragexp.calibrate.source import JudgedRun
from ragexp.errors import RagexpError
from ragexp.store.labels import Label, listed
from ragexp.store.reviews import human_labels, question_traces, schema_input, schema_names, schemas_of



@dataclass(frozen=True)
class Queue:
    queue_id: str
    name: str
    questions: list[str]  # question ids, in the sample's order
    schemas: dict[str, str]  # metric -> the name of its label schema
    link: str  # how to open the experiment's Review tab


HALLUCINATION = "Does the answer state anything its context does not support? Hallucinated: yes; Grounded: no."


def scale_text(metric: str, scale: tuple[float, float]) -> str:
    from ragexp.base.names import higher_is_worse

    ends = ("best", "worst") if higher_is_worse(metric) else ("worst", "best")
    return f"{metric} of the answer, from {scale[0]:g} ({ends[0]}) to {scale[1]:g} ({ends[1]})."


def label_schema(metric: str, scale: tuple[float, float], experiment_id: str, existing: dict[str, Any]) -> tuple[str, str]:
    """(schema id, name) of the label schema of `metric` on `scale` in the experiment (`existing`: its
    schemas by name): an existing one with the same input, else a new one (named with its scale when
    the metric's name is taken)."""
    from mlflow.genai import label_schemas

    wanted = schema_input(metric, scale)
    for name in schema_names(metric, scale):
        schema = existing.get(name)
        if schema is not None and schema.input == wanted:
            return schema.schema_id, name
        if schema is None:
            instruction = (HALLUCINATION if metric == "hallucination" else scale_text(metric, scale)) + \
                " The retrieved context: View full trace, span retrieve."
            created = label_schemas.create_label_schema(name, type="feedback", input=wanted, instruction=instruction,
                                                        enable_comment=True, experiment_id=experiment_id)
            return created.schema_id, name
    raise RagexpError(f"label schemas {' and '.join(repr(n) for n in schema_names(metric, scale))} of experiment "
                      f"{experiment_id} exist with another input than {metric}'s scale {scale[0]:g}-{scale[1]:g}: "
                      "rename or delete one in the Review tab's questions")


def needs_logged(run: JudgedRun) -> tuple[str, str]:
    """The run's MLflow run and experiment (a run folder's: the run it records once logged)."""
    return run.logged()


def export(run: JudgedRun, size: int, seed: int = 0, chosen: list[str] | None = None) -> Queue:
    """A review queue of `size` stratified judged questions of `run` (an MLflow run), or of the questions
    `chosen`, with a label schema per judge metric. Only questions recorded as traces can be queued: the
    sample is drawn among them."""
    run_id, experiment_id = needs_logged(run)
    from mlflow.genai import review_queues

    traces = question_traces(run_id, experiment_id)
    if not traces:
        raise RagexpError(f"run {run_id} has no per-question record in MLflow to review (it was logged with "
                          "tracker.question_records=false): log its folder again with python -m ragexp.track FOLDER")
    table = run.judged()
    recorded = replace(run, table=table[table["question_id"].astype(str).isin(traces)].reset_index(drop=True))
    if recorded.table.empty:
        raise RagexpError(f"run {run_id}: none of its judged questions has a record in MLflow to review")
    if chosen is None:
        chosen = [str(recorded.table.iloc[i]["question_id"]) for i in stratified_sample(recorded, size, seed)]
    elif unrecorded := [q for q in chosen if q not in traces]:
        raise RagexpError(f"run {run_id}: {len(unrecorded)} of the questions to queue have no record in MLflow "
                          f"(first: {unrecorded[0]}): log its folder again with python -m ragexp.track FOLDER")
    existing = schemas_of(experiment_id)
    schemas = {metric: label_schema(metric, run.scales[metric], experiment_id, existing) for metric in run.metrics}
    name = f"calibrate {run.name} {time.strftime('%Y-%m-%d %H:%M:%S')}"
    queue = review_queues.create_review_queue(name, queue_type="custom", schema_ids=[i for i, _ in schemas.values()],
                                              experiment_id=experiment_id)
    review_queues.add_items_to_review_queue(queue.queue_id, item_ids=[traces[q].trace_id for q in chosen])
    return Queue(queue.queue_id, name, chosen, {m: n for m, (_, n) in schemas.items()},
                 review_link(experiment_id, queue.queue_id))


def review_link(experiment_id: str, queue_id: str | None = None) -> str:
    """Where reviewers answer: the experiment's Review tab, on the queue `queue_id` when given (a
    server's address, or `mlflow ui` over a local store)."""
    import mlflow

    from ragexp.store.ui_links import ui_address

    path = f"#/experiments/{experiment_id}/review-queue" + (f"?selectedQueueId={queue_id}" if queue_id else "")
    return ui_address(mlflow.get_tracking_uri(), path)


def read(run: JudgedRun) -> list[Label]:
    """`--labels-from mlflow`: the people's answers on a logged run's questions (`human_labels`)."""
    run_id, experiment_id = needs_logged(run)
    labels, problems = human_labels(run_id, experiment_id, run.scales, set(run.table["question_id"].astype(str)))
    if problems:
        raise RagexpError(listed("labels from MLflow", problems))
    if not labels:
        raise RagexpError(f"run {run_id}: no person has labelled its questions in MLflow yet (python -m ragexp.calibrate "
                          f"{run_id} --export N --to mlflow puts some up for review; answer them in "
                          f"{review_link(experiment_id)})")
    return labels
