"""`system=python`: a function of yours answers each question."""
from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Literal, Mapping

from ragexp.base.settings import PositiveFloat, PositiveInt
from ragexp.components.systems.user_functions import FUNCTION, GIVEN, called, import_function, takes_params
from ragexp.errors import QuestionFailed, RagexpError, UserCodeStopped
from ragexp.types import Answer, Dataset, Output, Question
from ragexp.components.systems.base import System, output_of


class PythonSystem(System):
    """Your RAG code as a function `function(question: str, params: dict)` named `module:function`
    (importable from the directory ragexp runs in or the Python path); it returns a dict with
    `answer` and `contexts`, or a `ragexp.SystemOutput`. `params` are your system's settings, swept
    like any other (`-m system.params.top_k=3,5`). Its answers are cached under `function`, `params`
    and `version`: bump `version` when the code changes what it answers. `concurrency` questions are
    asked at once, in threads (`workers: threads`) or in as many worker processes (`workers:
    processes`: the function is imported in each; a worker stuck past `timeout_s` is killed and
    replaced, and one that crashes fails its question only). `timeout_s`: a question whose call
    takes longer fails at that deadline (in threads the run does not wait for the call; it cannot be
    stopped)."""

    def __init__(self, function: str | None, params: Mapping[str, Any] | None, version: str,
                 concurrency: PositiveInt, name: str | None, timeout_s: PositiveFloat | None,
                 workers: Literal["threads", "processes"]):
        self.path, self.params, self.version = str(function or ""), dict(params or {}), str(version)
        self.concurrency = concurrency
        self.timeout_s, self.workers = timeout_s, workers
        self._pool: Any = None  # the worker processes (workers=processes), started by `start`
        self.name = name or self.path or "python"
        self.function: Callable | None = None  # imported by `start`
        self.with_params = True  # called as function(question, params); False: function(question)
        self.counts: Counter = Counter()
        self._lock = threading.Lock()

    @classmethod
    def constraints(cls, function: str | None = None, **_) -> list[str]:
        if not function:
            return ["function: not set; set system.function=module:function (such as mypackage.rag:answer)"]
        return [] if FUNCTION.fullmatch(str(function)) else [
            f"function: {function!r} is not module:function (such as mypackage.rag:answer)"]

    def start(self, dataset: Dataset) -> list[str]:
        self.function = import_function(self.path, "system.function")
        self.with_params = takes_params(self.function)
        if self.workers == "processes":
            if self.path in GIVEN:
                raise RagexpError("system.workers=processes: each worker imports the function by its module:function "
                                  f"name, and {self.path} was handed over in Python; put it in a module, or use "
                                  "workers=threads")
            from ragexp.components.systems.workers import Workers

            self._pool = Workers(self.path, self.with_params, self.concurrency)
        return super().start(dataset)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def settings(self) -> dict:
        return {"system": "python", "function": self.path, "params": self.params, "version": self.version}

    def respond(self, question: Question) -> Output:
        with self._lock:
            self.counts["system_calls"] += 1
        started = time.perf_counter()
        if self.function is None:
            raise RuntimeError("PythonSystem.start() imports the function before the first question")
        try:
            value = self.answer(question.text)
        except DeadlineMissed:
            with self._lock:
                self.counts["system_failures"] += 1
            raise QuestionFailed(f"system: {self.path} did not answer within system.timeout_s={self.timeout_s:g} s "
                                 "(the call goes on in the background; the run does not wait for it)") from None
        except UserCodeStopped:
            raise
        except QuestionFailed:  # from a worker process, with its reason
            with self._lock:
                self.counts["system_failures"] += 1
            raise
        except Exception as err:  # noqa: BLE001 - the question fails with the reason, the run goes on
            with self._lock:
                self.counts["system_failures"] += 1
            raise QuestionFailed(f"system: {self.path} raised {type(err).__name__}: {err}") from None
        output = output_of(value)
        answer = output.answer
        if answer is not None and not answer.latency_s:
            output = Output(Answer(answer.text, round(time.perf_counter() - started, 4)), output.hits)
        return output

    def answer(self, question: str) -> Any:
        """The function's reply to `question`; with `timeout_s`, asked in a thread of its own and
        waited for that long at most (DeadlineMissed; the thread is a daemon, so the run and the
        process do not wait for it). Whatever the function raises, SystemExit included, is raised here."""
        assert self.function is not None
        if self._pool is not None:
            return self._pool.ask(question, dict(self.params), self.timeout_s)
        function = self.function

        def call() -> Any:
            return called(function(question, dict(self.params)) if self.with_params else function(question))

        if self.timeout_s is None:
            return call()
        reply: Future = Future()

        def run() -> None:
            try:
                reply.set_result(call())
            except BaseException as err:  # noqa: BLE001 - handed to the caller, which decides
                reply.set_exception(err)

        threading.Thread(target=run, name="ragexp-system", daemon=True).start()
        try:
            return reply.result(timeout=self.timeout_s)
        except FutureTimeout:
            raise DeadlineMissed from None

    def counters(self) -> dict[str, int]:
        return {"system_calls": self.counts["system_calls"], "system_failures": self.counts["system_failures"]}


class DeadlineMissed(Exception):
    """A system=python call took longer than `system.timeout_s`."""
