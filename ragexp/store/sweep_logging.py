"""A sweep's logging helper: one helper process (ragexp.store.log_ahead) logs the folders of all the
jobs of a sweep that run in its own process (Hydra's basic launcher). It opens the sweep's parent run (`{"call": "start_sweep", "name", "tags"}`,
answered `{"parent_id", "store", "where"}`), then each job hands its folder over and the next job
starts while the helper logs it, on the other core; the sweep waits for the last one before its
report. The helper reads one request a line until its input closes, and answers each with the
folder it logged. The sweep's callback owns its `SweepLogging` and hands it to each job
(ragexp.sweep.callbacks.SweepTracking.on_job_start); the helper is a child process of the sweep's
(ragexp.base.children), stopped at the latest when the sweep's process exits."""
from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

from ragexp.base.children import Child
from ragexp.store.log_ahead import error_of, helper, said, settings_of

log = logging.getLogger("ragexp.store.log_ahead")


class SweepLogging:
    """One helper for a sweep whose jobs run in this process, which then never imports MLflow while
    its jobs run: `start` it as the sweep begins (it imports MLflow while the grid is composed);
    `open_sweep` has it open the store and the sweep's parent run; a job's tracker that logs
    where the sweep does (`queued`) hands its folder over and returns at once; `finish` waits for
    the last folder and returns those that could not be logged. A folder the helper never
    answered for (it died) is logged by this process."""

    def __init__(self, child: Child):
        import threading

        self.child = child
        self.process: subprocess.Popen = child.process
        self.settings: dict | None = None  # the jobs' tracker settings it logs with, once the sweep is open
        self.where = ""
        self.sent: dict[str, dict] = {}  # folder -> {"parent_id", "name", "job"}
        self.answers: list[dict] = []
        self.answered = threading.Condition()
        self.reader = threading.Thread(target=self.read, daemon=True, name="sweep-logging")
        self.reader.start()  # answers are read as they come: a full pipe would stop the helper

    @classmethod
    def start(cls) -> SweepLogging | None:
        child = helper()
        return cls(child) if child is not None else None

    def read(self) -> None:
        try:
            for line in self.process.stdout:  # type: ignore[union-attr]
                try:
                    answer = json.loads(line)
                except ValueError:
                    continue
                with self.answered:
                    self.answers.append(answer)
                    self.answered.notify_all()
        except (OSError, ValueError):  # its output closed as it was stopped (`gone`)
            pass
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
        """The helper stopped: the sweep logs its jobs itself."""
        self.child.stop()
        self.settings = None  # (a job asking for it now logs itself)

    def queued(self, tracker, name: str | None, job: int | None):
        """`tracker`, its `log_folder` handed to the helper when it logs where the sweep does."""
        settings = tracker.ahead()
        if self.settings is None or settings is None or settings != self.settings:
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
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        self.reader.join()
        self.process.wait()
        self.child.stop()  # (it has ended: forgotten)
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


class Queued:
    """A sweep job's tracker whose folder the sweep's helper logs (`SweepLogging`): `log_folder`
    returns at once, without a run id."""

    def __init__(self, tracker, helper: SweepLogging, name: str | None, job: int | None):
        self.tracker, self.helper, self.name, self.job = tracker, helper, name, job

    def __getattr__(self, name: str):
        return getattr(self.tracker, name)

    def ahead(self) -> dict | None:  # served by the sweep's helper already
        return None

    def log_folder(self, folder: Path, parent_id: str | None = None) -> str | None:
        if self.helper.send(folder, parent_id, self.name, self.job):
            return None
        return self.tracker.log_folder(folder, parent_id)

    def where(self) -> str:  # said by the helper: MLflow is not imported here
        return self.helper.where
