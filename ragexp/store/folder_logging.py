"""A run folder logged as one MLflow run: its params, metrics, tags, dataset input, artifacts and
per-question records, read from what the job wrote there."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from ragexp.base.redact import scrub_url
from ragexp.store.batches import batches, staged
from ragexp.store.dead_runs import ended_if_stopped, process_tags
from ragexp.store.locked_retries import retry_locked
from ragexp.store.logged_record import read_record, write_record
from ragexp.store.quality_criteria import folder_criteria
from ragexp.store.run_config import CONFIG, flatten, options
from ragexp.store.run_folder import AGGREGATES, AUDIT_FILES, MAP_FILES, RUN_META, TABLE

log = logging.getLogger("ragexp")


def log_folder(client, experiment_id: str, folder: Path, parent_id: str | None = None,
               question_records: bool = True, feedback: str = "main") -> str:
    """Logs a run folder as one MLflow run: what `ragexp.store.run_folder.write_results` and `write_config`
    wrote there (params from config.yaml, metrics from results.json and run.json, the tags, every
    file as an artifact, the per-question table, each question as a trace with `feedback`'s scores:
    ragexp.store.trace_store.scores_on_traces). A job logs its folder this way, and
    `python -m ragexp.track FOLDER` logs it later the same way (e.g. when the server was down)."""
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

    from ragexp.base.yaml_text import read_yaml
    from ragexp.store.trace_store import log_traces

    folder = Path(folder)
    [(name, values)] = json.loads((folder / "results.json").read_text()).items()
    meta = json.loads((folder / RUN_META).read_text())
    config = read_yaml((folder / CONFIG).read_text()) or {}
    tags = {**(meta.get("tags") or {}),  # the sweep's own for the job (a racing sweep's round, question count)
            **process_tags(), "git_commit": meta.get("git_commit") or "unknown", "dataset_fingerprint": meta["dataset_fingerprint"],
            "ragexp_version": meta["ragexp_version"], "judge": meta["judge"],
            **{f"target.{key}": status for key, status in (meta.get("statuses") or {}).items()}}
    if meta.get("gate"):
        tags["gate"] = meta["gate"]
    if meta.get("process"):  # the job's process, beside the one logging it (ragexp.pid)
        tags["ragexp.job_pid"] = str(meta["process"]["pid"])
    if parent_id:
        tags["mlflow.parentRunId"] = parent_id
    failure = meta.get("failure")
    if failure:
        tags.update({"ragexp.status": "failed", "ragexp.failure_reason": scrub_url(failure)[:5000]})
    table = folder / TABLE
    if has_rows(table):  # the per-question table, as mlflow.log_table leaves it: the file and this tag
        tags[MLFLOW_LOGGED_ARTIFACTS] = json.dumps([{"path": TABLE, "type": "table"}])
    start_ms = int(meta["started"] * 1000) if meta.get("started") else None
    changed_since(client, experiment_id, name, meta["dataset_fingerprint"])
    left = read_record(folder).get("partial_run_id")  # a run an earlier attempt made but could not finish
    with ended_if_stopped(client) as run:  # from its creation to its end status: a stop in between ends it KILLED
        run_id = client.create_run(experiment_id, run_name=name, tags=tags, start_time=start_ms).info.run_id
        run.opened(run_id)
        write_record(folder, {**read_record(folder), "partial_run_id": run_id})  # until it is whole: never logged twice
        write = run.checked(lambda call, *args, **kwargs: call(*args, **kwargs))  # a stop is raised between two writes
        # the options chosen (`chunker=recursive`) beside the settings they make (`chunker._target_`, ...)
        params = [Param(k[:250], v[:6000]) for k, v in {**options(folder), **flatten(config)}.items()]
        now = int(time.time() * 1000)
        criteria, criteria_metrics = folder_criteria(folder, config, values, meta, run_id, feedback)
        metrics = [Metric(k, float(v), now, 0) for k, v in {**folder_metrics(values, meta), **criteria_metrics}.items()]
        for batch_params, batch_metrics in batches(params, metrics):
            write(client.log_batch, run_id, params=batch_params, metrics=batch_metrics)
        if criteria:
            write(client.log_batch, run_id, tags=[RunTag(k, v) for k, v in criteria.items()])
        write(client.log_inputs, run_id, datasets=[dataset_input(config, meta["dataset_fingerprint"])])
        files = [folder / f for f in (CONFIG, "results.json", AGGREGATES, *AUDIT_FILES, ".hydra/overrides.yaml",
                                      *MAP_FILES) if (folder / f).exists()]
        with staged(files + ([table] if MLFLOW_LOGGED_ARTIFACTS in tags else [])) as together:
            write(client.log_artifacts, run_id, str(together))  # one call: MLflow looks the run up once
        log_traces(client, folder, experiment_id, run_id, meta["judge"], run.checked(retry_locked),
                   light=question_records, started=meta.get("started"), feedback=feedback)
        write(client.set_terminated, run_id, "FAILED" if failure else "FINISHED")
        if left and left != run_id:
            deleted(client, left)
        write_record(folder, {k: v for k, v in read_record(folder).items() if k != "partial_run_id"})
    return run_id


def deleted(client, run_id: str) -> None:
    """The run an earlier attempt to log the folder left unfinished (the store went away as it logged),
    deleted now that the folder is logged whole; a run the store no longer has is nothing to delete."""
    from mlflow.exceptions import MlflowException

    try:
        client.delete_run(run_id)
    except MlflowException as err:
        log.warning("the unfinished run %s of an earlier attempt was not deleted: %s", run_id, str(err).splitlines()[0])


def has_rows(table: Path) -> bool:
    """Whether a run folder's per-question table holds a question."""
    return table.exists() and bool(json.loads(table.read_text())["data"])


def changed_since(client, experiment_id: str, name: str, fingerprint: str) -> None:
    """One line when the last run of this name in the experiment used another test set (another
    dataset_fingerprint: an MLflow evaluation dataset changed in place, a file edited): the two runs'
    scores then are not of the same questions. A name the store's search cannot take is let be."""
    try:
        earlier = client.search_runs([experiment_id], f"tags.`mlflow.runName` = '{name}'",
                                     order_by=["attributes.start_time DESC"], max_results=1)
    except Exception:  # noqa: BLE001 - a quote in the name, a store that cannot search: only this note is lost
        return
    before = earlier[0].data.tags.get("dataset_fingerprint") if earlier else None
    if before and before != fingerprint:
        log.warning("the test set changed since the last run named %s (%s, dataset_fingerprint %s, now %s): "
                    "its scores are not of the same questions", name, earlier[0].info.run_id, before, fingerprint)


def dataset_input(config: dict, digest: str):
    """The run's test set as an MLflow dataset input (the run page's Datasets): its name, ragexp's
    digest of its questions and corpus (the run's dataset_fingerprint: another version of the set
    gives another digest) and where it was read from."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    node = config.get("dataset") or {}
    where = {key: str(node[key]) for key in ("path", "name", "tracking_uri", "qrels") if node.get(key)}
    kind = "mlflow" if str(node.get("_target_", "")).endswith("MlflowDataset") else "local"
    return DatasetInput(Dataset(name=str(node.get("name") or "dataset"), digest=digest, source_type=kind,
                                source=json.dumps(where, sort_keys=True)),
                        tags=[InputTag("mlflow.data.context", "evaluation")])


def folder_metrics(values: dict, meta: dict) -> dict[str, float]:
    """What a run folder's results.json and run.json say to log as metrics."""
    numbers = {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    from ragexp.base.names import JOB_TIME, timing_key, work_key

    return {**numbers, **{work_key(k): v for k, v in (meta.get("work") or {}).items()},
            **{timing_key(k): v for k, v in (meta.get("timings_s") or {}).items()},
            **({JOB_TIME: meta["job_time_s"]} if meta.get("job_time_s") is not None else {})}
