"""SIGTERM and SIGINT (Ctrl-C) stop `python -m ragexp` as one stop, never a traceback: while the
command runs (`stopped_by_signals`), each raises `Interrupted` in the main thread, so that the run
in progress unwinds as code that raised it would unwind it (requests queued for a generator or a
judge are cancelled, an MLflow run being logged ends KILLED: ragexp.store.dead_runs), and the
command exits 128 + the signal's number with one line."""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT reached the command; a KeyboardInterrupt that code raises itself is not one."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


def interrupt(signum, frame) -> None:
    """The handler: Interrupted in the main thread."""
    raise Interrupted(signum)


STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # the exit statuses of a command they stopped: 130, 143


@contextmanager
def stopped_by_signals(program: str = "ragexp") -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM and SIGINT raise Interrupted; one that
    comes out of the block is said in one line and exits 128 + its number. The handlers before are
    put back after."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield
    except Interrupted as stop:
        print(f"{program}: error: stopped by {signal.Signals(stop.signum).name}: the run did not finish (a run being "
              "logged to MLflow ends KILLED); the same command again resumes from the stage cache", file=sys.stderr)
        sys.exit(stop.exit_status)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
