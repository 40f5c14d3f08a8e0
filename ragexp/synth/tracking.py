"""A synth run in MLflow: params (the resolved config), counts by type and rejection reason,
tokens and cost as metrics, the dataset folder as the artifact `dataset/`, and its fingerprint
as the tag `dataset_fingerprint` (the tag an evaluation run on that folder carries too)."""
from __future__ import annotations

import time
from pathlib import Path

from ragexp.store.provenance import git_commit
from ragexp.store.trackers import MlflowTracker, flatten


def log_synth(tracker, experiment: str, name: str, config: dict, metrics: dict[str, float], tags: dict[str, str],
              folder: Path) -> str | None:
    if not isinstance(tracker, MlflowTracker):
        return None
    from mlflow.entities import Metric, Param

    tracker.experiment = experiment
    client = tracker.client()
    run_id = client.create_run(tracker._experiment_id, run_name=name,
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
