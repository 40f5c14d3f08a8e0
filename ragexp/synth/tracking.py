"""A synth run in MLflow: params (the resolved config), counts by type and rejection reason,
tokens and cost as metrics, the dataset folder as the artifact `dataset/`, and its fingerprint
as the tag `dataset_fingerprint` (the tag an evaluation run on that folder carries too); and, when
asked, the set as an MLflow evaluation dataset (`to_mlflow_dataset`)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ragexp.store.provenance import git_commit
from ragexp.store.run_config import flatten


def log_synth(tracker, name: str, config: dict, metrics: dict[str, float], tags: dict[str, str],
              folder: Path) -> str | None:
    opened = tracker.opened()
    if opened is None:  # tracker=none
        return None
    from mlflow.entities import Metric, Param

    client = opened.client
    run_id = client.create_run(opened.experiment_id, run_name=name,
                               tags={**tags, "git_commit": git_commit(), "ragexp.role": "synth"}).info.run_id
    try:
        params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
        for start in range(0, len(params), 100):
            client.log_batch(run_id, params=params[start : start + 100])
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
        client.log_artifacts(run_id, str(folder), "dataset")
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    client.set_terminated(run_id, "FINISHED")
    return run_id


def to_mlflow_dataset(tracker, name: str, folder: Path) -> tuple[int, str]:
    """The set of `folder` merged into the MLflow evaluation dataset `name` of the tracker's store
    (made if absent): per question its text as `inputs.question`, its answer as `expected_response`
    (every accepted answer as `expected_answers`), its source chunks as `expected_retrieved_context`
    (their document ids as doc_uri) and its type as a tag; `dataset=mlflow` reads them back. Returns
    (records written, the dataset's digest)."""
    from mlflow.exceptions import MlflowException
    from mlflow.genai import datasets

    keeps_datasets(tracker)
    opened = tracker.opened()  # the store opened (and made) as for the run, its tracking URI set
    records = []
    for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines():
        question = json.loads(line)
        answers = question["answer"] if isinstance(question["answer"], list) else [question["answer"]]
        records.append({"inputs": {"question": question["question"]},
                        "expectations": {"expected_response": answers[0], "expected_answers": answers,
                                         "expected_retrieved_context": [{"doc_uri": c["doc_id"], "content": c["text"]}
                                                                        for c in question["source_chunks"]]},
                        "tags": {"type": question["type"], "synth_id": question["id"]}})
    try:
        found = datasets.get_dataset(name=name)
    except MlflowException:
        found = datasets.create_dataset(name=name, experiment_id=[opened.experiment_id])
    found.merge_records(records)
    return len(records), datasets.get_dataset(name=name).digest


def keeps_datasets(tracker) -> None:
    """Refuses (before any work) a `synth.mlflow_dataset` without an MLflow store to write it to."""
    from ragexp.errors import RagexpError

    if tracker.given_store() is None:
        raise RagexpError("synth.mlflow_dataset: the set goes to the tracker's MLflow store; choose tracker=mlflow")
