"""`system.workers=processes`: a `system=python` function called in a pool of worker processes
instead of threads, so that a call stuck past `system.timeout_s` is killed (a thread cannot be)
and a crash (a segfault, a kill) fails its question, not the run; `sys.exit()` or `os._exit()` in
the function ends the run naming it, as in threads (ragexp.base.user_exits). Each worker imports the
function itself by its `module:function` path and answers one question at a time over a pipe; a
worker that is killed or dies is replaced by a new one. Workers are started with `spawn` (a fresh
interpreter: no copy of the run's threads, models or open files)."""
from __future__ import annotations

import multiprocessing
import queue
from typing import Any

from ragexp.base.user_exits import ExitCalled, exits_guarded, where_raised
from ragexp.components.systems.user_functions import called, import_function
from ragexp.errors import QuestionFailed, UserCodeStopped


def serve(path: str, with_params: bool, connection) -> None:
    """A worker's life: import the function, then answer each (question, params) sent until the
    pipe closes. Exceptions are sent back as text; a BaseException (SystemExit, os._exit: ExitCalled)
    is said to the parent, naming where, and ends the worker."""
    with exits_guarded():
        function = import_function(path, "system.function")
        while True:
            try:
                question, params = connection.recv()
            except (EOFError, OSError):
                return
            try:
                value = called(function(question, params) if with_params else function(question))
            except Exception as err:  # noqa: BLE001 - the question fails with the reason, the worker goes on
                connection.send(("error", f"{type(err).__name__}: {err}"))
                continue
            except BaseException as err:  # noqa: BLE001 - code a run calls cannot end it: said to the parent
                connection.send(("stopped", stopped_at(err, path)))
                return
            try:
                connection.send(("answer", value))
            except Exception as err:  # noqa: BLE001 - a reply that cannot go between processes
                connection.send(("error", f"its reply cannot be sent from a worker process ({type(err).__name__}: {err}); "
                                          "return text, dicts and lists"))


def stopped_at(err: BaseException, path: str) -> str:
    """What stopped a worker's call, and where: `SystemExit(0) was raised in answer() at f.py:10`,
    `os._exit(3) was called in answer() at f.py:8`."""
    if isinstance(err, ExitCalled):
        return str(err)
    what = f"{type(err).__name__}({err.code!r})" if isinstance(err, SystemExit) else type(err).__name__
    return f"{what} was raised{where_raised(err) or f' in {path}'}"


class Worker:
    def __init__(self, path: str, with_params: bool):
        context = multiprocessing.get_context("spawn")
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=serve, args=(path, with_params, theirs), daemon=True,
                                       name="ragexp-system-worker")
        self.process.start()
        theirs.close()

    def stop(self) -> None:
        self.connection.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)


class Workers:
    """`size` worker processes for the function at `path`; `ask` is thread-safe (one question per
    idle worker, the others wait their turn)."""

    def __init__(self, path: str, with_params: bool, size: int):
        self.path, self.with_params = path, with_params
        self.idle: queue.Queue[Worker] = queue.Queue()
        self.all = [Worker(path, with_params) for _ in range(size)]
        for worker in self.all:
            self.idle.put(worker)

    def ask(self, question: str, params: dict, timeout_s: float | None) -> Any:
        """The function's reply to `question`; QuestionFailed when it raised, missed the deadline
        (its worker is killed) or its worker died; UserCodeStopped when it raised SystemExit or another
        BaseException, or called os._exit."""
        worker = self.idle.get()
        try:
            worker.connection.send((question, params))
            if not worker.connection.poll(timeout_s):
                worker = self.replace(worker)
                raise QuestionFailed(f"system: {self.path} did not answer within system.timeout_s={timeout_s:g} s "
                                     "(its worker process was killed and replaced)")
            kind, value = worker.connection.recv()
        except (EOFError, OSError):
            worker.process.join(timeout=5)  # the pipe closed as it died: its exit code is there once it is reaped
            code = worker.process.exitcode
            worker = self.replace(worker)
            raise QuestionFailed(f"system: {self.path}: its worker process died (exit code {code}) while "
                                 "answering; a new one takes the next question") from None
        finally:
            self.idle.put(worker)
        if kind == "error":
            raise QuestionFailed(f"system: {self.path} raised {value}")
        if kind == "stopped":
            raise UserCodeStopped(f"{value} (in a system.workers=processes worker): code a "
                                  "run calls cannot end it (a run that stops there would count as a pass); raise an "
                                  "exception to fail one question, or fix the code")
        return value

    def replace(self, worker: Worker) -> Worker:
        worker.stop()
        self.all.remove(worker)
        fresh = Worker(self.path, self.with_params)
        self.all.append(fresh)
        return fresh

    def close(self) -> None:
        for worker in self.all:
            worker.stop()
        self.all = []
