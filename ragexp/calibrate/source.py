"""The judged run to calibrate: its per-question table, its judge and the scale of each judge metric.

A run is an MLflow run id (its `questions.json` artifact, `judge._target_` param) or a run folder
holding `questions.json` (the table as `mlflow.log_table` writes it) or `questions.jsonl` (one row a
line) and the run's config (`.hydra/config.yaml` or `config.yaml`)."""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragexp.errors import RagexpError
from ragexp.judges.contract import Judge
from ragexp.store.question_tables import TABLE, TABLES, read_table, read_table_file
from ragexp.store.reader import RUN_ID, client_for, get_run

CONFIGS = (".hydra/config.yaml", "config.yaml")
CONFIG = "config.yaml"  # the run's config, as a job logs it to MLflow


@dataclass
class JudgedRun:
    name: str
    judge: str
    table: Any  # pandas.DataFrame, one row per question
    scales: dict[str, tuple[float, float]]  # judge metric -> (lowest, highest)
    run_id: str | None = None  # MLflow run id; None for a folder
    experiment_id: str | None = None
    tracking_uri: str | None = None
    judge_config: dict = field(default_factory=dict)  # the run's `judge` settings (its temperature, repeats)
    folder: Path | None = None  # a run folder's: its MLflow run, once logged, is the one it records

    def logged(self) -> tuple[str, str]:
        """The MLflow run and experiment of this run (a folder's: the run it records, its store made
        the current one); RagexpError in one line for a folder never logged."""
        if self.run_id is None and self.folder is not None:
            from ragexp.store.logged_record import never_logged, read_record, store_of
            from ragexp.store.reader import tracking_uri

            record = read_record(self.folder)
            if not record.get("run_id"):
                raise never_logged(self.folder)
            self.tracking_uri = tracking_uri(store_of(self.folder, self.tracking_uri))
            self.run_id, self.experiment_id = record["run_id"], record.get("experiment_id")
        if self.run_id is None or self.experiment_id is None:
            raise RagexpError(f"{self.name}: MLflow's review queues hold a logged run's questions: give the run's MLflow "
                              "run id or its logged run folder")
        return self.run_id, self.experiment_id

    @property
    def metrics(self) -> list[str]:
        return [m for m in self.scales if m in self.table]

    @property
    def kind_column(self) -> str | None:
        return next((c for c in ("type", "kind") if c in self.table and self.table[c].astype(bool).any()), None)

    def judged(self):
        """The rows of judged questions (failed questions have no scores to calibrate)."""
        table = self.table
        return table[table["status"] == "judged"] if "status" in table else table


def judge_scales(target: str | None, where: str, config: dict | None = None) -> dict[str, tuple[float, float]]:
    """Each metric's scale, as the judge class named by `target` declares it, and each criterion's
    of the run's rubric (its `rubric` node: judge=rubric, or a rubric beside the judge)."""
    if not target:
        raise RagexpError(f"{where}: no judge._target_ in the run's config, so the judge's scales are unknown")
    module, _, name = str(target).rpartition(".")
    try:
        judge = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise RagexpError(f"{where}: judge {target!r} is not a class of this ragexp version") from None
    if not (isinstance(judge, type) and issubclass(judge, Judge)):
        raise RagexpError(f"{where}: {target!r} is not a judge of this ragexp version")
    part = judge.scored_by  # judge=cascade: its scores of every question are its cheap judge's
    if part:
        node = dict(((config or {}).get("judge") or {}).get(part) or {})
        return judge_scales(node.get("_target_"), f"{where} (judge.{part})", {**(config or {}), "judge": node})
    given = judge.configured_scales((config or {}).get("judge") or {})  # judge=mlflow: its settings name its metrics
    scales = {metric: (float(lo), float(hi)) for metric, (lo, hi) in dict(given).items()}
    return {**scales, **rubric_scales((config or {}).get("rubric"), where)}


def rubric_scales(rubric: dict | None, where: str) -> dict[str, tuple[float, float]]:
    """A rubric node's criteria -> their scales (none without a rubric)."""
    from ragexp.judges.rubric.scales import parse_scale

    scales = {}
    for name, criterion in ((rubric or {}).get("criteria") or {}).items():
        try:
            scales[str(name)] = parse_scale((criterion or {}).get("scale", "binary")).bounds
        except ValueError as err:
            raise RagexpError(f"{where}: rubric.criteria.{name}.scale: {err}") from None
    return scales


def from_folder(folder: Path, tracking_uri: str | None = None) -> JudgedRun:
    import yaml

    table_file = next((folder / t for t in TABLES if (folder / t).is_file()), None)
    if table_file is None:
        raise RagexpError(f"{folder}: no per-question table ({' or '.join(TABLES)}) in this folder")
    config_file = next((folder / c for c in CONFIGS if (folder / c).is_file()), None)
    config = yaml.safe_load(config_file.read_text()) if config_file else {}
    target = ((config or {}).get("judge") or {}).get("_target_")
    table = read_table_file(table_file)
    results = folder / "results.json"
    named = [v.get("judge") for v in json.loads(results.read_text()).values()] if results.is_file() else []
    judge = str(table["judge"].iloc[0]) if "judge" in table and len(table) else (named[0] if named else "judge")
    return JudgedRun(folder.name, judge, table, judge_scales(target, str(config_file or folder), config),
                     tracking_uri=tracking_uri, folder=folder, judge_config=dict((config or {}).get("judge") or {}))


def from_mlflow(run_id: str, tracking_uri: str | None) -> JudgedRun:
    import tempfile


    client, resolved = client_for(tracking_uri)
    run = get_run(client, run_id, resolved)
    if TABLE not in {a.path for a in client.list_artifacts(run_id)}:
        raise RagexpError(f"run {run_id} has no per-question table ({TABLE}); calibrate a run logged by ragexp")
    import yaml

    with tempfile.TemporaryDirectory(prefix="ragexp-calibrate-") as tmp:
        table = read_table(Path(client.download_artifacts(run_id, TABLE, tmp)))
        logged = {a.path for a in client.list_artifacts(run_id)}
        config = yaml.safe_load(Path(client.download_artifacts(run_id, CONFIG, tmp)).read_text()) if CONFIG in logged else {}
    scales = judge_scales(run.data.params.get("judge._target_"), f"run {run_id}", config)
    return JudgedRun(run.info.run_name or run_id[:8], run.data.tags.get("judge", "judge"), table, scales,
                     run_id, run.info.experiment_id, resolved, dict((config or {}).get("judge") or {}))


def with_hallucination(run: JudgedRun) -> JudgedRun:
    """The judge's per-question `hallucination` (true / false: 1 / 0; the share of repeats that found
    one) becomes a metric people can label on 0-1, like the judge's scores."""
    if "hallucination" in run.table and "hallucination" not in run.scales:
        run.scales["hallucination"] = (0.0, 1.0)
        run.table["hallucination"] = run.table["hallucination"].map(
            lambda v: float(v) if isinstance(v, (bool, int, float)) else float("nan"))
    return run


def score_column(table, metric: str) -> str:
    """The column of a run's table that holds the judge's score of `metric`: itself, or in a
    judge=cascade run (whose `metric` column holds each question's term of the corrected mean, not a
    score) the cheap judge's `<metric>_cheap`."""
    cheap = f"{metric}_cheap"
    return cheap if "judged_by" in table and cheap in table else metric


def cheap_scores(run: JudgedRun) -> JudgedRun:
    """A run's table with each metric's column holding the judge's scores (`score_column`): people's
    labels of a cascade run are compared with its cheap judge's scores."""
    for metric in [*run.scales, "hallucination"]:
        if (column := score_column(run.table, metric)) != metric:
            run.table[metric] = run.table[column]
    return run


def load(target: str, tracking_uri: str | None = None) -> JudgedRun:
    """`target`: a run folder, or an MLflow run id."""
    path = Path(target)
    if path.is_dir():
        return with_hallucination(cheap_scores(from_folder(path, tracking_uri)))
    if RUN_ID.match(target):
        return with_hallucination(cheap_scores(from_mlflow(target, tracking_uri)))
    raise RagexpError(f"{target}: neither a run folder nor an MLflow run id (32 hex digits)")
