"""People's answers in MLflow's Review tab, read: the question records of a run (its light traces,
ragexp.store.trace_store) and the human feedback on them as labels on a judge's scales (calibrate
--labels-from mlflow, compare --labels-from mlflow, a cascade's people from MLflow). Only human
feedback counts: the judge's own (LLM_JUDGE), ragexp's answer metrics (CODE), the expectations and
overridden assessments are left out; a reviewer's latest answer to a question counts."""
from __future__ import annotations

from typing import Any

from ragexp.store.labels import Label, on_scale

QUESTION_TAG = "ragexp.question_id"  # the question a trace records (ragexp.store.trace_store)
HUMAN = "HUMAN"
PAGE = 500  # traces a search returns at once (the most an MLflow server gives)


def question_traces(run_id: str, experiment_id: str) -> dict[str, Any]:
    """question id -> the TraceInfo (with its assessments) of each question recorded in run `run_id`,
    in the store MLflow's tracking URI names."""
    from mlflow.tracing.client import TracingClient

    client, found, token = TracingClient(), {}, None
    while True:
        page = client.search_traces(locations=[experiment_id], run_id=run_id, include_spans=False,
                                    max_results=PAGE, page_token=token)
        for trace in page:
            qid = trace.info.tags.get(QUESTION_TAG)
            if qid is not None:
                found[str(qid)] = trace.info
        token = page.token
        if not token:
            return found


def schema_input(metric: str, scale: tuple[float, float]):
    from mlflow.genai.label_schemas import InputNumeric, InputPassFail

    if metric == "hallucination":
        return InputPassFail(positive_label="Hallucinated", negative_label="Grounded")
    return InputNumeric(min_value=scale[0], max_value=scale[1])


def schema_names(metric: str, scale: tuple[float, float]) -> tuple[str, str]:
    """The names a metric's label schema may have: the metric's, and the one with its scale."""
    return metric, f"{metric} ({scale[0]:g}-{scale[1]:g})"


def schemas_of(experiment_id: str) -> dict[str, Any]:
    """The experiment's label schemas by name."""
    from mlflow.genai import label_schemas

    return {s.name: s for s in label_schemas.list_label_schemas(experiment_id=experiment_id, max_results=1000)}


def answered_names(experiment_id: str, scales: dict[str, tuple[float, float]]) -> dict[str, str]:
    """The names people's answers to each judge metric go by -> the metric: the metric's label schema
    on its scale (see `label_schema`), or the metric's own name where the experiment has no such schema."""
    existing = schemas_of(experiment_id)
    names = {}
    for metric, scale in scales.items():
        matching = [n for n in schema_names(metric, scale) if n in existing and existing[n].input == schema_input(metric, scale)]
        if matching or metric not in existing:
            names.update({name: metric for name in matching or [metric]})
    return names


def human_labels(run_id: str, experiment_id: str, scales: dict[str, tuple[float, float]],
                 questions: set[str] | None = None) -> tuple[list[Label], list[str]]:
    """The people's answers on run `run_id`'s question traces as labels on the judge's `scales`, and the
    problems found (an answer off the scale), one line each naming the trace, the question and the reviewer.
    `questions`: the question ids to keep (all when None)."""
    latest: dict[tuple[str, str, str], tuple[int, Label]] = {}
    problems, names = [], answered_names(experiment_id, scales)
    for qid, info in sorted(question_traces(run_id, experiment_id).items()):
        if questions is not None and qid not in questions:
            continue
        for assessment in info.assessments or []:
            source = assessment.source
            if (assessment.feedback is None or source is None or str(source.source_type) != HUMAN
                    or assessment.valid is False or assessment.feedback.error is not None):
                continue
            metric = names.get(assessment.name)
            if metric is None:
                continue
            reviewer = source.source_id or "reviewer"
            try:
                value = on_scale(assessment.feedback.value, metric, scales[metric])
            except ValueError as err:
                problems.append(f"trace {info.trace_id} (question {qid}), {reviewer}'s answer: {err}")
                continue
            key, updated = (qid, metric, reviewer), int(assessment.last_update_time_ms or 0)
            if key not in latest or updated >= latest[key][0]:
                latest[key] = (updated, Label(qid, metric, reviewer, value, run_id))
    return [label for _, label in latest.values()], problems
