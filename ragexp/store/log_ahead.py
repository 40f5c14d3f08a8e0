"""A single run's MLflow logging, made ready while the run works. `python -m ragexp` starts a helper
process (`python -m ragexp.store.log_ahead`, `start_early`) before Hydra composes the config; it
imports MLflow (1.5 s of imports on the 2-core machine, most of what logging a run costs) and,
once the job gives it the tracker's settings (`LoggedAhead`), opens the store if it exists; then
it waits for the run folder and logs it as `MlflowTracker.log_folder` would, in its process. The
job's own process never imports MLflow. The helper's log lines come back with its answer and are
logged in the job's log; it ends when the job's process ends, whatever ends it.

If the process cannot start, dies or does not answer, the job logs the folder itself, as without
it; an error of the store (a server gone away, a bad URI) comes back as the same error it would
have raised in the job. The protocol is one JSON line each way: the tracker's settings, then
`{"folder", "parent_id"}`; the answer `{"run_id", "where", "link", "logs"}` or `{"error", "kind"}`.
A closed input ends the process without logging; a job that ends without a folder to log stops it.

A sweep whose jobs run in its own process (Hydra's basic launcher) has one such helper for all of
them (`SweepLogging`): it opens the sweep's parent run (`{"call": "start_sweep", "name", "tags"}`,
answered `{"parent_id", "store", "where"}`), then each job hands its folder over and the next job
starts while the helper logs it, on the other core; the sweep waits for the last one before its
report. The helper reads one request a line until its input closes, and answers each with the
folder it logged."""
from __future__ import annotations

import gc
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from ragexp.errors import RagexpError, StoreUnreachable

log = logging.getLogger(__name__)
ERRORS = {"RagexpError": RagexpError, "StoreUnreachable": StoreUnreachable}
JOB = "RAGEXP_LOGGING_FOR"  # the job's pid, in the helper's environment


EARLY: list[subprocess.Popen] = []  # a helper started as the command began (`start_early`), not yet given a tracker
SWEEP: list[SweepLogging] = []  # the helper of the sweep under way in this process, if it has one


def settings_of(tracker) -> dict:
    """What a helper needs to log as `tracker` would (an MlflowTracker)."""
    return {"experiment": tracker.experiment, "tracking_uri": tracker.tracking_uri,
            "question_records": tracker.question_records}


def helper() -> subprocess.Popen | None:
    """A new helper process (it imports MLflow at once), or None when none can start."""
    try:
        return subprocess.Popen([sys.executable, "-m", "ragexp.store.log_ahead"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), JOB: str(os.getpid())})
    except OSError as err:
        log.debug("logging ahead: no helper process (%s); the job logs its folder itself", err)
        return None


def start_early(argv: list[str]) -> None:
    """A single run of `python -m ragexp` that may log to MLflow starts its helper before Hydra composes
    its config: a short run (a warm stage cache) is over before MLflow is imported otherwise. A run
    that turns out not to log ends it unused (`discard`)."""
    options = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    if options & {"-m", "--multirun", "-h", "--help", "--hydra-help", "--info", "-c", "--cfg", "--shell-completion"}:
        return
    if any(a.startswith(("tracker=", "hydra.mode=")) and a != "tracker=mlflow" for a in argv) or "dry_run=true" in argv:
        return
    process = helper()
    if process is not None:
        EARLY.append(process)


def discard() -> None:
    """The early helper, unused: stopped at once (it has imported, not logged: no store touched)."""
    while EARLY:
        ended(EARLY.pop())


def abandon() -> None:
    """A sweep's helper still there when the command ends (the sweep stopped before its end: a bad
    grid, an interrupt): stopped. What it had not logged yet is logged when the sweep is run again
    (its jobs then come from the stage cache)."""
    while SWEEP:
        SWEEP[-1].gone()


def ended(process: subprocess.Popen) -> None:
    """A helper stopped without waiting for its imports to end (an error message is not held back by
    them): killed, and reaped."""
    process.kill()
    try:
        process.communicate(timeout=30)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass


class LoggedAhead:
    """An MlflowTracker whose store a helper process opens ahead of the logging (see the module)."""

    def __init__(self, tracker):
        self.tracker = tracker
        self.answer: dict = {}
        settings = settings_of(tracker)
        self.process = EARLY.pop() if EARLY else helper()
        discard()
        try:
            if self.process is not None:
                self.process.stdin.write(json.dumps(settings) + "\n")  # type: ignore[union-attr]
                self.process.stdin.flush()  # type: ignore[union-attr]
        except OSError as err:  # it died already
            log.debug("logging ahead: the helper is gone (%s); the job logs its folder itself", err)
            self.process = None

    def __getattr__(self, name: str):  # what the helper does not serve, the tracker does (in this process)
        return getattr(self.tracker, name)

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
        process, self.process = self.process, None
        if process is None:
            return None
        try:
            reply, _ = process.communicate(json.dumps(request) + "\n")
            return json.loads(reply.strip().splitlines()[-1])
        except (OSError, ValueError, IndexError) as err:
            log.debug("logging ahead: the helper gave no answer (%s); the job logs its folder itself", err)
            return None

    def where(self) -> str:
        return self.answer.get("where") or self.tracker.where()

    def ui_link(self, run_id: str | None = None, view: str | None = None) -> str:
        if self.answer.get("run_id") == run_id and view is None:
            return self.answer.get("link", "")
        return self.tracker.ui_link(run_id, view)

    def close(self) -> None:
        """Ends the helper without logging (the job ended before it had a folder to log; a store
        the helper was opening is left as the next command's opening would find it)."""
        process, self.process = self.process, None
        if process is not None:
            ended(process)


class SweepLogging:
    """One helper for a sweep whose jobs run in this process, which then never imports MLflow while
    its jobs run: `start` it as the sweep begins (it imports MLflow while the grid is composed);
    `open_sweep` has it open the store and the sweep's parent run; a job's tracker that logs
    where the sweep does (`queued`) hands its folder over and returns at once; `finish` waits for
    the last folder and returns those that could not be logged. A folder the helper never
    answered for (it died) is logged by this process."""

    def __init__(self, process: subprocess.Popen):
        import threading

        self.process = process
        self.settings: dict | None = None  # the jobs' tracker settings it logs with, once the sweep is open
        self.where = ""
        self.sent: dict[str, dict] = {}  # folder -> {"parent_id", "name", "job"}
        self.answers: list[dict] = []
        self.answered = threading.Condition()
        self.reader = threading.Thread(target=self.read, daemon=True, name="sweep-logging")
        self.reader.start()  # answers are read as they come: a full pipe would stop the helper

    @classmethod
    def start(cls) -> SweepLogging | None:
        process = helper()
        if process is None:
            return None
        SWEEP.append(cls(process))
        return SWEEP[-1]

    def read(self) -> None:
        for line in self.process.stdout:  # type: ignore[union-attr]
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            with self.answered:
                self.answers.append(answer)
                self.answered.notify_all()
        with self.answered:  # the helper is gone
            self.answers.append({"call": "ended"})
            self.answered.notify_all()

    def write(self, message: dict) -> bool:
        try:
            self.process.stdin.write(json.dumps(message) + "\n")  # type: ignore[union-attr]
            self.process.stdin.flush()  # type: ignore[union-attr]
            return True
        except (OSError, ValueError) as err:  # it died: the jobs log their folders themselves
            log.debug("sweep logging: the helper is gone (%s)", err)
            return False

    def open_sweep(self, tracker, name: str, tags: dict[str, str]) -> dict | None:
        """The store opened and the sweep's parent run made by the helper, as `tracker.start_sweep`
        would: {"parent_id", "store", "where"}; an error of the store raised as the tracker raises
        it; None when the helper is gone (the sweep then opens it itself, and logs its jobs itself)."""
        if not (self.write(settings_of(tracker)) and self.write({"call": "start_sweep", "name": name, "tags": tags})):
            self.gone()
            return None
        with self.answered:
            self.answered.wait_for(lambda: any(a.get("call") in ("start_sweep", "ended") for a in self.answers))
            answer = next(a for a in self.answers if a.get("call") in ("start_sweep", "ended"))
            self.answers.remove(answer)
        if answer["call"] == "ended":
            self.gone()
            return None
        said(answer)
        if "error" in answer:
            self.gone()
            raise error_of(answer)
        self.settings = {**settings_of(tracker), "tracking_uri": tracker.tracking_uri or answer["store"]}
        self.where = answer["where"]
        return answer

    def gone(self) -> None:
        """The helper stopped and forgotten: the sweep logs its jobs itself."""
        if self in SWEEP:
            SWEEP.remove(self)
        ended(self.process)

    def queued(self, tracker, name: str | None, job: int | None):
        """`tracker`, its `log_folder` handed to the helper when it logs where the sweep does."""
        from ragexp.store.trackers import MlflowTracker

        if self.settings is None or type(tracker) is not MlflowTracker or settings_of(tracker) != self.settings:
            return tracker
        return Queued(tracker, self, name, job)

    def send(self, folder: Path, parent_id: str | None, name: str | None, job: int | None) -> bool:
        key = str(Path(folder).resolve())
        if not self.write({"folder": key, "parent_id": parent_id}):
            return False
        self.sent[key] = {"parent_id": parent_id, "name": name, "job": job}
        return True

    def finish(self, tracker) -> list[dict]:
        """Waits for every folder handed over; those not logged, with why: [{"folder", "name", "job",
        "error", "kind"}]. The helper's log lines are logged here."""
        if self in SWEEP:
            SWEEP.remove(self)
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        self.reader.join()
        self.process.wait()
        answers = {a.get("folder"): a for a in self.answers}
        failed = []
        for folder, job in self.sent.items():
            answer = answers.get(folder)
            if answer is None:  # the helper died before it: logged here, as without one
                try:
                    tracker.log_folder(Path(folder), job["parent_id"])
                except Exception as err:  # noqa: BLE001 - reported with the job, as a job's own logging is
                    failed.append({**job, "folder": folder, "error": str(err), "kind": type(err).__name__})
                continue
            said(answer)
            if "error" in answer:
                failed.append({**job, "folder": folder, "error": answer["error"], "kind": answer.get("kind", "Exception")})
        return failed


def said(answer: dict) -> None:
    """The helper's log lines, logged in this process."""
    for level, name, message in answer.get("logs", []):
        logging.getLogger(name).log(level, "%s", message)


def error_of(answer: dict) -> Exception:
    """The helper's error as the tracker raised it there: its class, or one of the same name."""
    kind = answer.get("kind") or "Exception"
    return ERRORS.get(kind, type(kind, (Exception,), {}))(answer["error"])


class Queued:
    """A sweep job's tracker whose folder the sweep's helper logs (`SweepLogging`): `log_folder`
    returns at once, without a run id."""

    def __init__(self, tracker, helper: SweepLogging, name: str | None, job: int | None):
        self.tracker, self.helper, self.name, self.job = tracker, helper, name, job

    def __getattr__(self, name: str):
        return getattr(self.tracker, name)

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        if self.helper.send(folder, parent_id, self.name, self.job):
            return None
        return self.tracker.log_folder(folder, parent_id)

    def where(self) -> str:  # said by the helper: MLflow is not imported here
        return self.helper.where


class Collected(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[tuple[int, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelno, record.name, record.getMessage()))


def with_the_job(interval_s: float = 0.05) -> None:
    """The helper is part of the job: if the job's process dies (SIGKILL), it ends at once too, as if
    one process had been killed (a run it was logging stays RUNNING, for the next command to close)."""
    import threading
    import time

    job = int(os.environ.get(JOB) or os.getppid())  # the job's pid as it said it (it may be gone already)

    def watch() -> None:
        while os.getppid() == job:
            time.sleep(interval_s)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="job-watch").start()


def serve() -> None:
    """The helper: the tracker's settings, the store opened, then a single run's folder logged, or a
    sweep's parent run opened and its jobs' folders logged one after another."""
    with_the_job()
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
