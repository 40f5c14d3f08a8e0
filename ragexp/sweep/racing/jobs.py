"""A race's jobs: the overrides each round gives a configuration, where its run folder is, and the
folder read back as a `ragexp.store.reader.Run` (the per-question table the tests run on)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ragexp.store.question_tables import read_table
from ragexp.store.reader import Run
from ragexp.store.run_folder import AGGREGATES, FAILURE_FILE, TABLE
from ragexp.store.run_config import CONFIG, flatten, options


@dataclass
class Job:
    """One configuration in one round."""

    config: int  # index of the configuration in the grid
    name: str
    round: int  # 1-based
    questions: int
    number: int  # hydra.job.num
    overrides: list[str]
    folder: Path | None = None
    status: str = "planned"  # planned | ok | failed
    reason: str = ""
    run: Run | None = None

    def tags(self) -> dict[str, str]:
        """The child run's tags (ragexp.run.app reads them from the sweep folder's sweep.json)."""
        return {"ragexp.racing.round": str(self.round), "ragexp.racing.questions": str(self.questions),
                "ragexp.racing.configuration": str(self.config)}

    def record(self) -> dict:
        return {"config": self.config, "name": self.name, "round": self.round, "questions": self.questions,
                "job": self.number, "folder": str(self.folder) if self.folder else None, "status": self.status,
                "reason": self.reason}


def round_overrides(point: list[str], size: int, seed: int) -> list[str]:
    return [*point, f"question_sample.size={size}", f"question_sample.seed={seed}"]


def job_folder(loader, master, overrides: list[str], number: int) -> Path:
    """The run folder Hydra's launchers give job `number` (hydra.sweep.dir / hydra.sweep.subdir)."""
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.to_container(master.hydra.sweep, resolve=False).get("subdir") == "${hydra.job.num}":  # type: ignore[union-attr]
        return (Path(str(master.hydra.sweep.dir)) / str(number)).absolute()  # the default: no job to compose

    config = loader.load_sweep_config(master, list(overrides))
    with open_dict(config):
        config.hydra.job.id = number
        config.hydra.job.num = number
    return (Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)).absolute()


def same_overrides(folder: Path, overrides: list[str]) -> bool:
    """Whether the folder's job ran with these overrides (Hydra's .hydra/overrides.yaml)."""
    import yaml

    from ragexp.base.yaml_text import read_yaml

    path = folder / ".hydra" / "overrides.yaml"
    try:
        return list(read_yaml(path.read_text()) or []) == list(overrides)
    except (OSError, yaml.YAMLError):
        return False


def finished(job: Job) -> bool:
    """A job whose folder holds its outcome (results.json or failure.json) for these overrides:
    a resumed race reads it instead of running it again."""
    folder = job.folder
    return (folder is not None and same_overrides(folder, job.overrides)
            and ((folder / "results.json").exists() or (folder / FAILURE_FILE).exists()))


def read_outcome(job: Job) -> None:
    """Sets the job's status from its folder: failed (failure.json, or no results at all), else ok
    with its Run (params, metrics, per-question table, aggregation spec)."""
    folder = job.folder
    if folder is None or not folder.is_dir():
        job.status, job.reason = "failed", job.reason or "the job left no run folder"
        return
    failure = folder / FAILURE_FILE
    if failure.exists():
        job.status, job.reason = "failed", json.loads(failure.read_text()).get("reason", "failed")
        return
    if not (folder / "results.json").exists():
        job.status, job.reason = "failed", job.reason or "the job left no results.json (killed?)"
        return
    job.run = read_run(folder, str(job.number))
    job.status = "ok"


def read_run(folder: Path, run_id: str) -> Run:
    """A job's run folder as the comparison reads an MLflow run (ragexp.store.reader.Run): its params
    as the run's are logged (`ragexp.store.folder_logging`), the options chosen beside the settings."""
    from ragexp.base.yaml_text import read_yaml

    [(name, values)] = json.loads((folder / "results.json").read_text()).items()
    metrics = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    config = read_yaml((folder / CONFIG).read_text()) if (folder / CONFIG).exists() else {}
    overrides_file = folder / ".hydra" / "overrides.yaml"
    overrides = list(read_yaml(overrides_file.read_text()) or []) if overrides_file.exists() else []
    aggregation = json.loads((folder / AGGREGATES).read_text())["aggregates"] if (folder / AGGREGATES).exists() else None
    return Run(run_id=run_id, name=name, experiment_id="", start_time=0, params={**options(folder), **flatten(config or {})},
               metrics=metrics, tags={"judge": str(values.get("judge", ""))}, overrides=overrides,
               table=read_table(folder / TABLE), aggregation=aggregation, folder=folder)
