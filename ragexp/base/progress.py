"""Progress on long work, quiet when it is quick. On a terminal, a bar for work that counts its
items; elsewhere (a CI log, a pipe), and for work that does not count (a model loading, a run
logged to MLflow, a sweep's report), a line once the work has taken `QUIET_S` seconds, then one
every `EVERY_S`, and one when it ends. `BOARD` holds the work under way; a thread of its own says
the lines that are due, also while the work blocks (a model loading holds no loop to count in).
`loading` also keeps the seconds spent loading models, which a run's own time leaves out."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")

QUIET_S = 10.0  # work quicker than this says nothing
EVERY_S = 30.0  # then a line at most this often


def duration(seconds: float) -> str:
    """`45 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass(eq=False)
class Task:
    """One piece of work under way: what it is, how many items it has (None: it does not count),
    how many are done, when it started and when it last said how far it is (None: never)."""

    what: str
    total: int | None
    started: float
    done: int = 0
    said: float | None = None

    def line(self, now: float) -> str:
        took = duration(now - self.started)
        if self.total:
            return f"{self.what}: {self.done:,} of {self.total:,} ({self.done / self.total:.0%}), {took}"
        return f"{self.what}: {self.done:,} done, {took}" if self.done else f"{self.what}: {took} so far"


class Board:
    """The tasks under way and the lines they are due, by a clock the caller reads (`now`): a task
    says nothing before `quiet` seconds, then a line at most every `every` seconds, and, if it said
    anything, one when it ends."""

    def __init__(self, quiet: float = QUIET_S, every: float = EVERY_S):
        self.quiet, self.every = quiet, every
        self.tasks: list[Task] = []
        self.lock = threading.Lock()

    def start(self, what: str, total: int | None, now: float) -> Task:
        task = Task(what, total, now)
        with self.lock:
            self.tasks.append(task)
        return task

    def due(self, now: float) -> list[str]:
        lines = []
        with self.lock:
            for task in self.tasks:
                if now - task.started >= self.quiet and (task.said is None or now - task.said >= self.every):
                    task.said = now
                    lines.append(task.line(now))
        return lines

    def end(self, task: Task, now: float) -> str | None:
        with self.lock:
            if task in self.tasks:
                self.tasks.remove(task)
        if task.said is None:
            return None
        count = f"{task.done:,} " + ("items " if task.total is None else f"of {task.total:,} ") if task.done else ""
        return f"{task.what}: {count}done in {duration(now - task.started)}"


BOARD = Board()
_LOADING = [0.0]  # seconds spent in `loading` in this process
_TICKER: list[threading.Thread] = []
_STARTING = threading.Lock()


def say(line: str) -> None:
    if sys.stderr.isatty():  # beside a bar, tqdm writes the line above it
        from tqdm.auto import tqdm

        tqdm.write(line, file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)


def ticking(clock: Callable[[], float] = time.monotonic) -> None:
    """The lines due, said every second, for the rest of the process (a daemon thread's loop)."""
    pause = threading.Event()
    while not pause.wait(1.0):
        for line in BOARD.due(clock()):
            say(line)


def started(what: str, total: int | None) -> Task:
    """A task on `BOARD`, with the thread that says its lines running."""
    with _STARTING:
        if not _TICKER:
            _TICKER.append(threading.Thread(target=ticking, name="ragexp-progress", daemon=True))
            _TICKER[0].start()
    return BOARD.start(what, total, time.monotonic())


def ended(task: Task) -> None:
    line = BOARD.end(task, time.monotonic())
    if line:
        say(line)


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    """`items`, saying how far they are: a bar on a terminal, else lines when it takes long."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(items, desc=desc, total=total, leave=False)
    return counted(items, desc, total)


def counted(items: Iterable[T], desc: str, total: int | None) -> Iterator[T]:
    task = started(desc, total)
    try:
        for item in items:
            yield item
            task.done += 1
    finally:
        ended(task)


@contextmanager
def working(what: str) -> Iterator[Task]:
    """A block of work that does not count its items (a run logged to MLflow, a report built):
    a line when it takes long, and one when it ends then."""
    task = started(what, None)
    try:
        yield task
    finally:
        ended(task)


@contextmanager
def loading(what: str) -> Iterator[None]:
    """A model loading: `working`, and its seconds kept (`loading_seconds`)."""
    began = time.perf_counter()
    try:
        with working(f"loading {what}"):
            yield
    finally:
        _LOADING[0] += time.perf_counter() - began


def loading_seconds() -> float:
    """Seconds this process has spent loading models (`loading`), for a run's own time to leave out."""
    return _LOADING[0]
