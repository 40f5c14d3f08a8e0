"""One job, whichever door it comes through (`python -m ragexp`, a job of a sweep, `ragexp.evaluate`):
check every setting, name the run, run it (or estimate it: `dry_run=true`), tell whether it failed
as a whole, write its folder and its config, log it. The doors say only where the folder is, what
a sweep left for the job, and what to do with an error."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from ragexp.base.children import Child
from ragexp.base.progress import working
from ragexp.base.redact import scrub_url, written_config
from ragexp.config.build import build
from ragexp.config.validation import validate
from ragexp.base.user_exits import ExitCalled, calls, exits_guarded, where_raised
from ragexp.base.stops import Interrupted
from ragexp.errors import RagexpError, UserCodeStopped
from ragexp.llm.estimate import Estimate
from ragexp.run.embedding_map import draw
from ragexp.run.pipeline import estimate, run
from ragexp.run.settings import EMBEDDING_MAP, RunSettings
from ragexp.store.run_folder import MAP_IMAGE, MAP_POINTS, seal, write_run_files
from ragexp.store.run_owner import FolderIncomplete, claim, reason, release
from ragexp.store.log_ahead import LoggedAhead
from ragexp.store.logged_record import not_logged, record_store
from ragexp.store.run_config import write_config
from ragexp.store.sweep_logging import SweepLogging
from ragexp.types import RunResult

log = logging.getLogger(__name__)
OWN_PIPELINE = ("dataset", "chunker", "embedder", "retriever", "generator")  # a run of ragexp's pipeline, named


def run_name(cfg: DictConfig, choices: Mapping[str, Any], swept: str = "", given: str | None = None) -> str:
    """The run's name: `given` (ragexp.evaluate's `name=`) or `run_name` if set; in a sweep, the
    values of its swept keys (`swept`, e.g. `semantic · bm25`: ragexp.config.overrides.point_name); otherwise the chosen
    components joined (sample-recursive-minilm-dense-extractive, the reranker after the retriever
    when one reranks), or for another system under test the dataset and the system, a file of
    recorded outputs by its name (answers.jsonl: answers-recorded), an MLflow evaluation dataset by
    its name (quarry-qa-recorded)."""
    if given:
        return given
    if cfg.get("run_name"):
        return str(cfg.run_name)
    if swept:
        return scrub_url(swept)
    own = choices.get("system") in (None, "pipeline")  # else: recorded outputs, your function or your service
    chosen = [choices.get(g) for g in (OWN_PIPELINE if own else ("dataset", "system"))]
    if own and choices.get("reranker") not in (None, "none"):
        chosen.insert(4, choices.get("reranker"))  # after the retriever, when one reranks
    path = OmegaConf.select(cfg, "dataset.path", default=None)
    if not own and choices.get("dataset") == "outputs" and isinstance(path, str) and path:
        chosen[0] = Path(path).stem
    if not own and choices.get("dataset") == "mlflow" and OmegaConf.select(cfg, "dataset.name", default=None):
        chosen[0] = str(cfg.dataset.name)  # the MLflow evaluation dataset's name
    return "-".join(str(c) for c in chosen if c) or "run"


def run_failure(result, max_share: float) -> str | None:
    """Why the run failed as a whole, or None: every question failed and nothing was measured, or
    of the questions with something to judge (all but retrieval-only ones), all or more than
    `max_share` failed."""
    judgeable = [r for r in result.questions if r.status != "retrieved"]
    failed = [r for r in judgeable if r.failed]
    aggregates = result.aggregates
    total = aggregates["total_questions"]
    retrieval_scored = total - aggregates.get("retrieval_excluded_questions", 0)
    first = f" (first reason: {failed[0].failure})" if failed else ""
    if total and aggregates.get("failed_questions") == total and not retrieval_scored:
        return f"all {total} questions failed and nothing was measured{first}"
    if judgeable and len(failed) == len(judgeable):
        return f"run failed: all {len(failed)} questions failed{first}"
    if judgeable and len(failed) / len(judgeable) > max_share:
        return (f"run failed: {len(failed)} of {len(judgeable)} questions failed, more than "
                f"max_failed_share={max_share:g}{first}")
    return None


def stopped_by(err: BaseException) -> UserCodeStopped:
    """The error that ends a run whose code raised `err`, a BaseException that is not an Exception
    (or called os._exit: ExitCalled), naming where: the innermost frame neither ragexp's nor the
    standard library's (the user's function), else the innermost one."""
    if isinstance(err, ExitCalled):
        what, at = f"os._exit({err.code!r}) was called", err.where
    else:
        kind = f"{type(err).__name__}({err.code!r})" if isinstance(err, SystemExit) else type(err).__name__
        what, at = f"{kind} was raised", where_raised(err)
    if isinstance(err, KeyboardInterrupt):  # code that raised it (a signal is Interrupted): the run ends, not as a pass
        return UserCodeStopped(f"the run was interrupted ({type(err).__name__}{at}); nothing of it was logged")
    return UserCodeStopped(f"{what}{at}: code a run calls cannot end it (a run that stops there would "
                           "count as a pass); raise an exception to fail one question, or fix the code")


def write_map(points: dict, folder: Path, drawn: bool) -> None:
    """embedding_map.json (the points, small), and embedding_map.png when `drawn`."""
    (folder / MAP_POINTS).write_text(json.dumps(points) + "\n", encoding="utf-8")
    if drawn:
        draw(points, folder / MAP_IMAGE)


class TrackingFailed(Exception):
    """The run measured and wrote its folder, but the tracker could not take it."""


@dataclass(frozen=True)
class Outcome:
    """What a job measured and wrote: the run, its folder and results file, why it failed as a
    whole (None when it did not)."""

    result: RunResult
    folder: Path
    results_file: Path
    failure: str | None


@dataclass
class Job:
    """One job's sequence. `choices`: the chosen option of each config group (Hydra's runtime
    choices); `swept`: in a sweep, the point's swept values; `name`: a name the caller gives;
    `tracking_uri`, `parent_id`, `tags`: what a sweep left for its jobs (its store, its parent
    run, the job's tags). `tracker` and `name` are set as the job goes, so that a door can record
    a job that failed half-way. Who logs the run besides the tracker, handed by the door
    (ragexp.run.app.Jobs): `early`, the logging helper started with the command for a single run
    (`ahead`), and `sweep_logging`, the helper of the sweep this job runs in, in its process."""

    cfg: DictConfig
    choices: Mapping[str, Any]
    swept: str = ""
    name: str | None = None
    tracking_uri: str | None = None
    parent_id: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    tracker: Any = None
    started: float = field(default_factory=time.time)
    ahead: bool = False  # a single run from the command line: its MLflow store made ready while it works
    early: Child | None = None  # the helper the command started for that (ragexp.store.log_ahead.start_early)
    sweep_logging: SweepLogging | None = None  # the sweep's helper, which logs this job's folder while the next job runs
    number: int | None = None  # a sweep's job: its number in the sweep

    def run(self, folder: Path) -> Outcome | Estimate:
        """Checks every setting (every problem reported at once, before any work), names the run
        and runs it, writes `folder` (results, the audit trail, the config that re-runs it, the
        run's name included); with `dry_run=true`, the Estimate of its LLM requests instead, and
        nothing written. Code the run calls that raises SystemExit, KeyboardInterrupt or any other
        BaseException, or calls os._exit, ends it with UserCodeStopped, naming that code: never a
        silent pass. A folder that cannot be written as the run ends is FolderIncomplete; a signal
        (Interrupted) goes through as it is. A run that ends with a message releases its folder
        (ragexp.store.run_owner.release); one that ends otherwise leaves it to be named later."""
        try:
            with exits_guarded():  # os._exit in code the run calls: ExitCalled (ragexp.base.user_exits)
                return self.stages(folder)
        except (FolderIncomplete, Interrupted):
            raise
        except RagexpError:
            release(folder)
            raise
        except Exception:
            raise
        except BaseException as err:  # noqa: BLE001 - sys.exit() in a user's function, a generator closed...
            release(folder)
            raise stopped_by(err) from None

    def stages(self, folder: Path) -> Outcome | Estimate:
        claim(folder)  # this run's folder alone: another live run's is refused before anything is written
        validate(self.cfg, RunSettings)
        share = float(self.cfg.max_failed_share)
        self.tracker = build(self.cfg.tracker)
        self.tracker.use_store(self.tracking_uri)
        self.name = run_name(self.cfg, self.choices, self.swept, self.name)
        if OmegaConf.select(self.cfg, "llm.dry_run", default=False):
            self.stop_early()
            return estimate(self.cfg, self.name)
        if self.ahead and self.tracker.ahead() is not None:  # MLflow imported in a process of its own meanwhile
            self.tracker = LoggedAhead(self.tracker, self.early)
        else:
            self.stop_early()  # a helper started with the command, not needed
            if self.sweep_logging is not None:  # a sweep's job in the sweep's process
                self.tracker = self.sweep_logging.queued(self.tracker, self.name, self.number)
        for_folder: dict = {}
        result = run(self.cfg, self.name, for_folder)
        exits = calls()
        if exits:  # os._exit whose ExitCalled was caught, or ended a thread nobody waited for: no pass
            raise stopped_by(exits[0])
        failure = run_failure(result, share)
        try:
            with working("writing the run folder"):
                results_file = self.write(result, folder, failure, for_folder)
        except OSError as err:
            raise FolderIncomplete(f"cannot write the run folder {folder} ({reason(err)}): it is left incomplete, "
                                   "without results.json, and nothing was logged; free space (or fix the folder) and run "
                                   "the command again: the stage cache keeps the work done") from None
        self.send_spans(folder, result.name)
        return Outcome(result, folder, results_file, failure)

    def write(self, result: RunResult, folder: Path, failure: str | None, for_folder: dict) -> Path:
        """The run folder, results.json last (ragexp.store.run_folder.seal): the files the tracker
        logs, the judge's own (Judge.run_files: a cascade with people's labels, the labels wanted),
        the embedding map, the config that re-runs it and the store it is meant for. Returns the
        path of results.json."""
        write_run_files(result, folder, self.started, failure, self.tags,
                        {str(k): str(v) for k, v in self.choices.items() if v is not None})
        for file_name, text in for_folder.get("judge_files", {}).items():
            with (folder / file_name).open("w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        if for_folder.get("embedding_map") is not None:  # drawn for a single run (auto), or for every job (true)
            mode = self.cfg.get("embedding_map", EMBEDDING_MAP)
            drawn = mode is True or (mode == "auto" and not self.swept)
            write_map(for_folder["embedding_map"], folder, drawn)
        write_config(folder, {**written_config(self.cfg), "run_name": result.name})
        record_store(folder, self.tracker.given_store())  # the store it is meant for, before it is logged
        return seal(result, folder)

    def send_spans(self, folder: Path, name: str) -> None:
        """tracing=otlp: the folder's spans sent to their endpoint; what became of them said in one
        line (an endpoint that refuses them does not fail the run: they stay in the folder)."""
        if "tracing" not in self.cfg:
            return
        said = build(self.cfg.tracing).send(folder, name)
        if said is not None:
            sent, line = said
            (log.info if sent else log.warning)(line)

    def stop_early(self) -> None:
        if self.early is not None:
            self.early.stop()

    def log(self, outcome: Outcome) -> str | None:
        """The run folder logged to the tracker (None: it logs nothing); when the store cannot take
        it (a server gone away), TrackingFailed saying where the results are and the command that
        logs them later."""
        try:
            with working("logging the run"):  # a line when it takes long (not naming the store: asking a
                # tracker that logs ahead where it logs would import MLflow in the job's process)
                return self.tracker.log_folder(outcome.folder, self.parent_id)
        except Exception as err:  # noqa: BLE001 - any failure of the store: the results are safe on disk
            raise TrackingFailed(not_logged(self.tracker.where(), type(err).__name__, str(err), outcome.folder)) from None
