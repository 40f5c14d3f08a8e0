"""Dead-run closing: runs left RUNNING by a process that is gone (killed while it logged them) are
ended KILLED by the next command against the store; a run being logged ends KILLED or FAILED when
its process is stopped or fails, never RUNNING."""
from __future__ import annotations

import logging
import signal
import socket
import threading
from contextlib import contextmanager
from typing import Callable

from ragexp.base.processes import alive, this_process
from ragexp.base.stops import Interrupted

log = logging.getLogger("ragexp")


def process_tags() -> dict[str, str]:
    """Which process logs a run (host, pid, start time), so that a later command can tell a run
    whose process is gone (killed while logging) from a live one (`close_dead_runs`)."""
    me = this_process()
    return {"ragexp.host": me["host"], "ragexp.pid": str(me["pid"]), "ragexp.process_started": str(me["started"])}


def still_running(client, run_id: str) -> bool:
    """Whether a run is RUNNING now. Asked again once its process is found gone: a process that ended
    its run and exited between the search and that finding is not one that was killed (a process
    that is gone ends nothing later)."""
    return client.get_run(run_id).info.status == "RUNNING"


def logger_of(tags: dict[str, str]) -> dict | None:
    """The process record a run's tags name, or None when they name none (or not wholly)."""
    pid, started = tags.get("ragexp.pid"), tags.get("ragexp.process_started")
    if not tags.get("ragexp.host") or not (pid or "").isdigit() or not (started or "").isdigit():
        return None
    return {"host": tags["ragexp.host"], "pid": int(pid), "started": int(started)}  # type: ignore[arg-type]


class RunBeingLogged:
    """The run `ended_if_stopped` watches. A stop (SIGTERM, SIGINT) is held while MLflow writes: raised
    in the middle of a write, it would leave that write's SQLite transaction open in this process,
    and ending the run KILLED would then wait on its lock (20 s, then fail: the run stays RUNNING).
    It is raised between writes (`check`)."""

    def __init__(self):
        self.run_id: str | None = None
        self.held: int | None = None  # the stop that came

    def opened(self, run_id: str) -> None:
        """The run is created: from here a stop ends it KILLED."""
        self.run_id = run_id
        self.check()

    def check(self) -> None:
        """Between two writes: a stop that came is raised here."""
        if self.held is not None:
            raise Interrupted(self.held)

    def checked(self, write: Callable) -> Callable:
        """`write(call, *args)` (a function that makes the MLflow write `call`) with a check before each."""
        def call(*args, **kwargs):
            self.check()
            return write(*args, **kwargs)
        return call

    def stop(self, signum, frame) -> None:
        """The handler of SIGTERM and SIGINT."""
        self.held = signum


@contextmanager
def ended_if_stopped(client):
    """While a run is created and logged (`with ended_if_stopped(client) as run:`, then
    `run.opened(run_id)` once created and `run.check()` between writes): SIGTERM and SIGINT stop the
    process (Interrupted, in the main thread, at the next check), and a stop (SystemExit,
    KeyboardInterrupt, Interrupted) ends the run KILLED, an error FAILED, so that no run is left
    RUNNING by a process that can still act. A stop that comes after the last check (the run's
    end status written) is raised as the block ends."""
    run = RunBeingLogged()
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, run.stop) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield run
    except Exception:
        if run.run_id is not None:
            client.set_terminated(run.run_id, "FAILED")
        raise
    except BaseException:
        if run.run_id is not None:
            client.set_terminated(run.run_id, "KILLED")
        raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if run.held is not None:
        raise Interrupted(run.held)


def close_dead_runs(client, experiment_id: str) -> None:
    """Runs left RUNNING by a process of this host that no longer runs (killed while it logged
    them: the pid is gone, or taken by a newer process) are ended KILLED, tagged
    `ragexp.closed_by` with this process. A live process's runs, and runs logged on another host,
    stay as they are."""
    found = client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
    me = process_tags()
    for run in found:
        record = logger_of(run.data.tags)
        if record is None or alive(record) or not still_running(client, run.info.run_id):
            continue
        if run.data.tags.get("ragexp.role") == "sweep":
            ended_sweep(client, run, me)
            continue
        client.set_tag(run.info.run_id, "ragexp.closed_by", f"{me['ragexp.host']}:{me['ragexp.pid']}")
        client.set_terminated(run.info.run_id, "KILLED")
        log.warning("run %s (%s) was left RUNNING by process %s on %s, which is gone; marked KILLED",
                    run.info.run_id, run.info.run_name, record["pid"], record["host"])


def ended_sweep(client, run, me: dict[str, str]) -> None:
    """A sweep's parent run whose sweep ended without closing it (the store was gone at its end: its
    folder's sweep.json says `ended`) ends FAILED, tagged with the jobs not logged. A sweep killed
    before its end is left to its rerun (`end_killed_sweeps`)."""
    from ragexp.store.logged_record import JOBS_NOT_LOGGED
    from ragexp.store.run_folder import read_sweep

    folder = run.data.tags.get("sweep_dir")
    ended = read_sweep(folder).get("ended") if folder else None
    if not ended:
        return
    unlogged = list(ended.get("jobs_not_logged") or [])
    if unlogged:
        client.set_tag(run.info.run_id, JOBS_NOT_LOGGED, ", ".join(unlogged)[:5000])
    client.set_tag(run.info.run_id, "ragexp.closed_by", f"{me['ragexp.host']}:{me['ragexp.pid']}")
    client.set_terminated(run.info.run_id, "FAILED")
    log.warning("sweep run %s (%s) ended without closing it (%s); marked FAILED%s: `python -m ragexp.track %s` logs "
                "what is missing and ends it as the sweep would have", run.info.run_id, run.info.run_name,
                ended.get("not_closed_because") or "its store did not answer",
                f", {len(unlogged)} jobs not logged" if unlogged else "", folder)


def end_killed_sweeps(client, experiment_id: str, overrides: str | None, successor: str) -> None:
    """A sweep killed before its end leaves its parent run RUNNING. Started again with the
    same overrides (it resumes from the stage cache), it marks that run KILLED, tagged
    `ragexp.resumed_by` with the new parent run, once this host has no process of it, and so
    every child run it left RUNNING (a job killed while it was being logged)."""
    runs = client.search_runs([experiment_id], "tags.`ragexp.role` = 'sweep' and attributes.status = 'RUNNING'")
    for run in runs:
        tags = run.data.tags
        pid = tags.get("ragexp.pid", "")
        launcher = {"host": tags.get("ragexp.host"), "pid": int(pid) if pid.isdigit() else 0}
        if (run.info.run_id != successor and tags.get("sweep_overrides") == overrides
                and launcher["host"] == socket.gethostname() and not alive(launcher)
                and still_running(client, run.info.run_id)):
            client.set_tag(run.info.run_id, "ragexp.resumed_by", successor)
            client.set_terminated(run.info.run_id, "KILLED")
            orphans = client.search_runs([experiment_id], f"tags.`mlflow.parentRunId` = '{run.info.run_id}' "
                                         "and attributes.status = 'RUNNING'")
            for child in orphans:
                client.set_tag(child.info.run_id, "ragexp.resumed_by", successor)
                client.set_terminated(child.info.run_id, "KILLED")
            log.warning("sweep run %s (%s) was killed before its end; marked KILLED, resumed by run %s",
                        run.info.run_id, run.info.run_name, successor)
            if orphans:
                log.warning("and its %d child runs left RUNNING; marked KILLED", len(orphans))
