"""The Tracker protocol: what a job, a sweep and the commands ask of a tracker, whichever it is (the
no-op tracker, MLflow's, or MLflow's logged ahead by a helper process). Code outside `ragexp.store`
asks a tracker through these methods only, never by its class or its private attributes."""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ragexp.types import RunResult


class Opened(NamedTuple):
    """A tracker's MLflow store, opened: its client and the id of the tracker's experiment (made if new)."""

    client: Any
    experiment_id: str


@runtime_checkable
class Tracker(Protocol):
    tracking_uri: str | None  # the store given (None: $MLFLOW_TRACKING_URI, else MLflow's default; or none)
    logs_traces: bool  # tracing=on: the run folder's traces.jsonl becomes MLflow traces

    def where(self) -> str:
        """Where the runs go, in words (the store's URI with any credentials masked)."""

    def given_store(self) -> dict | None:
        """The store a run folder records before it is logged (`ragexp.store.logged_record`):
        {"tracking_uri", "experiment"}; None for a tracker that logs nothing. Imports no MLflow."""

    def opened(self) -> Opened | None:
        """The MLflow store opened (made if new) and this tracker's experiment; None when it logs nothing."""

    def in_experiment(self, name: str) -> Tracker:
        """This tracker logging to the experiment `name` instead."""

    def ahead(self) -> dict | None:
        """The settings a logging helper process needs to log as this tracker would
        (`ragexp.store.log_ahead`), or None when none can (it logs nothing, or is already served by one)."""

    def close(self) -> None:
        """Its helper process stopped, if it has one and the job ended before logging."""

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        """How to open a run (or the experiment's runs table) in MLflow's UI; "" for none."""

    def share_view(self, metrics: list[str], params: list[str], sweep: str | None = None,
                   placed_only: bool = False) -> str | None:
        """The key of a shared runs-table view with these columns (of the runs of `sweep` only, when
        given; with `placed_only`, those of them with a verdict), or None."""

    def imported(self) -> None:
        """The modules this tracker logs with, imported now (a sweep imports them before its grid)."""

    def store(self) -> str | None:
        """Where the runs go, for the jobs of a sweep to log next to their parent run."""

    def use_store(self, store: str | None) -> None:
        """A sweep job logs to its parent run's store, unless its own is given."""

    def start_sweep(self, name: str, tags: dict[str, str]) -> str | None:
        """The sweep's parent run opened; its id."""

    def end_sweep(self, parent_id: str | None, results: dict, failed: bool = False,
                  counts: dict | None = None, tags: dict[str, str] | None = None) -> None:
        """The sweep's parent run closed with the merged results, the job counts and `tags`."""

    def log_report(self, run_id: str | None, folder: Path) -> None:
        """A sweep's report folder as artifacts of its parent run."""

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        """A run folder logged as one run; its id (None: logged later, or not at all)."""

    def log_run(self, result: RunResult, config: dict[str, Any], parent_id: str | None = None,
                started: float | None = None, failure: str | None = None) -> str | None:
        """A run logged as a job logs it (its folder written to a temporary one, then `log_folder`)."""

    def log_failed(self, name: str, config: dict[str, Any], parent_id: str | None, reason: str,
                   files: tuple[Path, ...] = (), started: float | None = None,
                   tags: dict[str, str] | None = None) -> str | None:
        """A job that failed before it had results, as a FAILED run with the reason."""
