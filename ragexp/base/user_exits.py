"""Code a run calls (a `system=python` function, a component, a judge) cannot end the run as a pass.

`sys.exit()` raises SystemExit, which the run catches like any exception. `os._exit(n)` does not
raise: it ends the process at once, from any thread, with the status it is given (0: a pass for a
CI job), and no handler runs. So while a run works, `exits_guarded()` puts `called_exit` in the
place of `os._exit` in the process that entered it: a call raises `ExitCalled` (a SystemExit) in
the calling thread instead, which ends the run as sys.exit() would, naming the caller. A call in
another process (a child forked while the run works: multiprocessing's fork, os.fork) is the real
`os._exit`. A call whose ExitCalled the code catches, or that ends a thread nobody waits for, is
kept in `calls()`, which the run reads before it passes.

What no Python code can see (a segfault, SIGKILL, `posix._exit`, an out-of-memory kill) leaves the
run folder without results.json and its owner record (ragexp.store.run_owner.claim) naming a
process that is gone: the next command in the same outputs folder and `python -m ragexp.track
FOLDER` name it (ragexp.store.run_owner.ended_without_results)."""
from __future__ import annotations

import inspect
import os
import sysconfig
import threading
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NoReturn

REAL_EXIT = os._exit
OWN = Path(__file__).resolve().parents[1]  # ragexp's own code
STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()

_lock = threading.Lock()
_guards = 0  # runs under way in this process (ragexp.evaluate may run several in threads)
_pid: int | None = None  # the process whose os._exit is replaced
_calls: list[ExitCalled] = []


class ExitCalled(SystemExit):
    """`os._exit(code)` called by code a run called, raised in its place; `where`: the caller,
    as ` in function() at file:line`."""

    def __init__(self, code: object, where: str):
        super().__init__(code)
        self.where = where

    def __str__(self) -> str:
        return f"os._exit({self.code!r}) was called{self.where}"


def theirs(filename: str) -> bool:
    """Whether a frame's file is neither ragexp's nor the standard library's (the user's code, or a
    library it uses)."""
    path = Path(filename).resolve()
    return not path.is_relative_to(OWN) and not path.is_relative_to(STDLIB)


def where_raised(err: BaseException) -> str:
    """Where `err` was raised, as ` in function() at file:line`: the innermost frame of its
    traceback that is neither ragexp's nor the standard library's (the user's function), else the
    innermost one; "" without a traceback."""
    frames = traceback.extract_tb(err.__traceback__)
    chosen = [f for f in frames if theirs(f.filename)] or frames
    if not chosen:
        return ""
    frame = chosen[-1]
    return f" in {frame.name}() at {frame.filename}:{frame.lineno}"


def called_exit(code: int) -> NoReturn:
    """`os._exit` while a run works in this process: ExitCalled in the calling thread; the real
    `os._exit` in any other process."""
    if os.getpid() != _pid:
        REAL_EXIT(code)
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    del frame
    where = f" in {caller.f_code.co_name}() at {caller.f_code.co_filename}:{caller.f_lineno}" if caller else ""
    stop = ExitCalled(code, where)
    with _lock:
        _calls.append(stop)
    raise stop


@contextmanager
def exits_guarded() -> Iterator[None]:
    """While the block runs, `os._exit` in this process is `called_exit` (see the module); the
    first guard of a process clears `calls()`."""
    global _guards, _pid
    with _lock:
        if _guards == 0:
            _calls.clear()
            _pid = os.getpid()
            os._exit = called_exit  # type: ignore[assignment]
        _guards += 1
    try:
        yield
    finally:
        with _lock:
            _guards -= 1
            if _guards == 0:
                os._exit = REAL_EXIT
                _pid = None


def calls() -> list[ExitCalled]:
    """The os._exit calls made under the guards now open (or the last one), first first."""
    with _lock:
        return list(_calls)
