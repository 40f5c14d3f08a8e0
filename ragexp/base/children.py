"""Child processes that end with the process that started them. `start` launches one and stops it
when this process exits (an exit handler: Python's own exit, and `ragexp.__main__.command`'s quick
exit, which runs the exit handlers before `os._exit`); the child, a Python program, calls
`watch_parent()` at its start, so that it ends itself within `WATCH_S` seconds once its parent is
gone however it ended (kill -9 included), when no exit handler ran. A child forked along with this
process (a worker forked by a pool) is not stopped by the fork's exit: only by the process that
started it. The child processes of ragexp's own programs start here: the local model server
(ragexp.llm.served) and MLflow's logging helper (ragexp.store.log_ahead); `python -m ragexp.ui`
starts MLflow's server itself and stops it at its end."""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterator

from ragexp.base.processes import alive, this_process

PARENT = "RAGEXP_CHILD_OF"  # in the child's environment: its parent as "host pid started"
WATCH_S = 1.0  # how often a child looks for its parent (it ends within this, well under 5 s)

_RUNNING: list[Child] = []
_LOCK = threading.Lock()


class Child:
    """A started child process (`process`, a Popen); `stop` ends it (idempotent)."""

    def __init__(self, process: subprocess.Popen, name: str):
        self.process, self.name, self.owner = process, name, os.getpid()

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        """Closes its input, asks it to end (SIGTERM), waits up to `grace_s`, then kills it; its
        output is closed once it has ended (a thread of the starter may still be reading it).
        A child that has ended already is only forgotten."""
        if os.getpid() != self.owner:  # a forked copy of the starter: the child is not ours to stop
            return
        with _LOCK:
            if self in _RUNNING:
                _RUNNING.remove(self)
        closed(self.process.stdin)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        closed(self.process.stdout)


def closed(stream: IO[str] | None) -> None:
    try:
        if stream is not None:
            stream.close()
    except (OSError, ValueError):
        pass


def start(argv: list[str], name: str, *, stdin: Any = subprocess.DEVNULL, stdout: Any = subprocess.DEVNULL,
          stderr: Any = subprocess.DEVNULL, env: dict[str, str] | None = None, text: bool = True) -> Child:
    """Starts `argv` as a child of this process, stopped at this process's exit; `name` says what
    it is in messages. Raises OSError when it cannot start."""
    me = this_process()
    environment = {**(os.environ if env is None else env), PARENT: f"{me['host']} {me['pid']} {me['started']}"}
    with stops_held():  # a stop raised inside Popen, once the child runs, would leave it unknown to stop_all
        process = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=stderr, env=environment, text=text,
                                   start_new_session=True)  # a Ctrl-C of the terminal reaches the parent, which stops it
        child = Child(process, name)
        with _LOCK:
            if not _RUNNING and not _registered:
                atexit.register(stop_all)
                _registered.append(True)
            _RUNNING.append(child)
    return child


@contextmanager
def stops_held() -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM and SIGINT wait: each is delivered to the
    handler before the block once it ends (other threads cannot set handlers, and signals reach the
    main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)  # None: one set outside Python
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


_registered: list[bool] = []


def running() -> list[Child]:
    """The children this process started and has not stopped, oldest first."""
    with _LOCK:
        return [c for c in _RUNNING if c.owner == os.getpid()]


def stop_all() -> None:
    """Stops every child this process started and has not stopped (the exit handler)."""
    for child in running():
        child.stop()


def parent_record() -> dict | None:
    """The parent that started this process through `start` ({"host", "pid", "started"}), or None."""
    value = os.environ.get(PARENT, "").split()
    if len(value) != 3:
        return None
    host, pid, started = value
    try:
        return {"host": host, "pid": int(pid), "started": None if started == "None" else int(started)}
    except ValueError:
        return None


def watch_parent(on_gone: Callable[[], Any] | None = None, every_s: float = WATCH_S) -> threading.Thread:
    """In the child: a daemon thread that calls `on_gone` (default: end this process at once, exit
    status 0) when the parent named by `start` is gone, or, without one, when this process's parent
    changes from the one it had at its start."""
    record = parent_record() or {**this_process(), "pid": os.getppid(), "started": None}

    def gone() -> bool:
        return os.getppid() != record["pid"] or not alive(record)

    def watch() -> None:
        while not gone():
            time.sleep(every_s)
        (on_gone or (lambda: os._exit(0)))()

    thread = threading.Thread(target=watch, daemon=True, name="parent-watch")
    thread.start()
    return thread


def read_line(stream: IO[str], timeout_s: float) -> str | None:
    """The next line a child writes to `stream` (a pipe), or None after `timeout_s` or at its end."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True, name="child-line")
    reader.start()
    reader.join(timeout_s)
    return lines[0] if lines and lines[0] else None
