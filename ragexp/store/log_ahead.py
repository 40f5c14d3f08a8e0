"""A single run's MLflow logging, made ready while the run works. `python -m ragexp` starts a helper
process (`python -m ragexp.store.log_ahead`, `start_early`) before Hydra composes the config; it
imports MLflow (1.5 s of imports on the 2-core machine, most of what logging a run costs) and,
once the job gives it the tracker's settings (`LoggedAhead`), opens the store if it exists; then
it waits for the run folder and logs it as `MlflowTracker.log_folder` would, in its process. The
job's own process never imports MLflow. The helper's log lines come back with its answer and are
logged in the job's log; it is a child process of the job's (ragexp.base.children): stopped when the
job's process exits, and ending itself at once when that process dies (kill -9).

If the process cannot start, dies or does not answer, the job logs the folder itself, as without
it; an error of the store (a server gone away, a bad URI) comes back as the same error it would
have raised in the job. The protocol is one JSON line each way: the tracker's settings, then
`{"folder", "parent_id"}`; the answer `{"run_id", "where", "link", "logs"}` or `{"error", "kind"}`.
A closed input ends the process without logging; a job that ends without a folder to log stops it.

The helper started with the command is handed to its job as an object (`start_early`'s, passed by
ragexp.run.app.Jobs to the job); nothing is kept in this module. A sweep whose jobs run in its own
process (Hydra's basic launcher) has one such helper for all of them: ragexp.store.sweep_logging."""
from __future__ import annotations

import gc
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from ragexp.base import children
from ragexp.errors import RagexpError, StoreUnreachable

log = logging.getLogger(__name__)
ERRORS = {"RagexpError": RagexpError, "StoreUnreachable": StoreUnreachable}
NAME = "MLflow logging helper"  # the helper among the children of a process (ragexp.base.children.running)
WATCH_S = 0.05  # how often the helper looks for the job's process: it ends with it, as one process would


def settings_of(tracker) -> dict:
    """What a helper needs to log as `tracker` would (`Tracker.ahead`: an MlflowTracker's)."""
    return tracker.ahead() or {}


def helper() -> children.Child | None:
    """A new helper process (it imports MLflow at once), or None when none can start."""
    try:
        return children.start([sys.executable, "-m", "ragexp.store.log_ahead"], NAME, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    except OSError as err:
        log.debug("logging ahead: no helper process (%s); the job logs its folder itself", err)
        return None


def start_early(argv: list[str]) -> children.Child | None:
    """A single run of `python -m ragexp` that may log to MLflow starts its helper before Hydra composes
    its config: a short run (a warm stage cache) is over before MLflow is imported otherwise. The
    command hands it to its job (`LoggedAhead`); a run that turns out not to log stops it unused
    (it has imported, not logged: no store touched)."""
    options = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    if options & {"-m", "--multirun", "-h", "--help", "--hydra-help", "--info", "-c", "--cfg", "--shell-completion"}:
        return None
    if any(a.startswith(("tracker=", "hydra.mode=")) and a != "tracker=mlflow" for a in argv) or "dry_run=true" in argv:
        return None
    return helper()


class LoggedAhead:
    """An MlflowTracker whose store a helper process opens ahead of the logging (see the module)."""

    def __init__(self, tracker, child: children.Child | None = None):
        """`child`: the helper started with the command (`start_early`), else one is started now."""
        self.tracker = tracker
        self.answer: dict = {}
        settings = settings_of(tracker)
        self.child = child if child is not None else helper()
        try:
            if self.child is not None:
                self.child.process.stdin.write(json.dumps(settings) + "\n")  # type: ignore[union-attr]
                self.child.process.stdin.flush()  # type: ignore[union-attr]
        except OSError as err:  # it died already
            log.debug("logging ahead: the helper is gone (%s); the job logs its folder itself", err)
            self.close()

    @property
    def process(self) -> subprocess.Popen | None:
        return self.child.process if self.child is not None else None

    def __getattr__(self, name: str):  # what the helper does not serve, the tracker does (in this process)
        return getattr(self.tracker, name)

    def ahead(self) -> dict | None:  # served by a helper already
        return None

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        answer = self.asked({"folder": str(Path(folder).resolve()), "parent_id": parent_id})
        if answer is None:  # no helper, or it died: as without one
            return self.tracker.log_folder(folder, parent_id)
        said(answer)
        if "error" in answer:  # as the job would have raised it
            raise error_of(answer)
        self.answer = answer
        return answer["run_id"]

    def asked(self, request: dict) -> dict | None:
        child, self.child = self.child, None
        if child is None:
            return None
        try:  # one line each way; not Popen.communicate, which on Ctrl-C or SIGTERM (Interrupted, a KeyboardInterrupt)
            # waits 0.25 s for the helper to end before raising: enough for it to finish logging the run
            child.process.stdin.write(json.dumps(request) + "\n")  # type: ignore[union-attr]
            child.process.stdin.flush()  # type: ignore[union-attr]
            for line in child.process.stdout:  # type: ignore[union-attr]
                if line.startswith("{") and "call" in (answer := json.loads(line)):  # not a line a library printed
                    return answer
            raise EOFError("it ended without an answer")
        except (OSError, ValueError, EOFError) as err:
            log.debug("logging ahead: the helper gave no answer (%s); the job logs its folder itself", err)
            return None
        except BaseException:  # SIGTERM or Ctrl-C as it logs: told with SIGTERM, the run it opened ends KILLED (dead_runs.ended_if_stopped)
            child.stop(grace_s=10.0)
            raise
        finally:
            child.stop()  # answered: its input closed, it ends

    def where(self) -> str:
        return self.answer.get("where") or self.tracker.where()

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        if self.answer.get("run_id") == run_id and view is None:
            return self.answer.get("link", "")
        return self.tracker.ui_link(run_id, view)

    def close(self) -> None:
        """Ends the helper without logging (the job ended before it had a folder to log; a store
        the helper was opening is left as the next command's opening would find it)."""
        child, self.child = self.child, None
        if child is not None:
            child.stop()


def said(answer: dict) -> None:
    """The helper's log lines, logged in this process."""
    for level, name, message in answer.get("logs", []):
        logging.getLogger(name).log(level, "%s", message)


def error_of(answer: dict) -> Exception:
    """The helper's error as the tracker raised it there: its class, or one of the same name."""
    kind = answer.get("kind") or "Exception"
    return ERRORS.get(kind, type(kind, (Exception,), {}))(answer["error"])


class Collected(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))


def serve() -> None:
    """The helper: the tracker's settings, the store opened, then a single run's folder logged, or a
    sweep's parent run opened and its jobs' folders logged one after another. It is part of the
    job: if the job's process dies (SIGKILL), it ends at once too, as if one process had been killed
    (a run it was logging stays RUNNING, for the next command to close)."""
    children.watch_parent(every_s=WATCH_S)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the job, which stops it with SIGTERM (Child.stop): one stop
    from ragexp.store.trackers import MlflowTracker

    import mlflow
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401 - imported now, while the job works

    from ragexp.store.sqlite_store import database_of

    collected = Collected()
    logging.getLogger("ragexp").addHandler(collected)
    logging.getLogger("ragexp").setLevel(logging.INFO)
    settings = sys.stdin.readline()
    if not settings.strip():
        return  # the command did not log after all
    tracker = MlflowTracker(**json.loads(settings))

    database = database_of(tracker.tracking_uri or mlflow.get_tracking_uri())
    opening = None
    if database is not None and database.is_file():  # a store that exists: opened now; a new one only if the job logs
        try:
            tracker.client()
        except Exception as err:  # noqa: BLE001 - said when the folder is asked for, as the job would say it
            opening = err
    # MLflow's modules are a heap of long-lived objects that a full garbage collection would scan
    # while the folder is logged (0.17 s of a 0.5 s logging on the 2-core machine): set aside now.
    gc.freeze()
    for line in sys.stdin:  # a single run's folder, or a sweep's jobs' one after another (closed input: none left)
        if not line.strip():
            continue
        request = json.loads(line)
        try:
            if opening is not None:
                raise opening
            if request.get("call") == "start_sweep":  # a sweep's parent run, before its jobs
                parent_id = tracker.start_sweep(request["name"], request["tags"])
                answer = {"parent_id": parent_id, "store": tracker.store(), "where": tracker.where()}
            else:
                run_id = tracker.log_folder(Path(request["folder"]), request.get("parent_id"))
                answer = {"run_id": run_id, "where": tracker.where(), "link": tracker.ui_link(run_id)}
        except Exception as err:  # noqa: BLE001 - the job raises it again, as if it had logged itself
            answer = {"error": str(err), "kind": type(err).__name__}
        print(json.dumps({**answer, "call": request.get("call"), "folder": request.get("folder"),
                          "logs": collected.records}), flush=True)
        collected.records.clear()


if __name__ == "__main__":
    serve()
    # The store has committed every write and the answer is out: the interpreter's teardown of
    # MLflow's modules (0.9 s on the 2-core machine, which the job waited for) is skipped.
    os._exit(0)
