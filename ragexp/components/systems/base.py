"""The system under test: who produces `(answer, contexts)` for each question (the `system` group).

One contract, `System`, so that judges, metrics, aggregation, the gate, the audit trail, tracing
and tracking never know which system ran:

- `pipeline` (`PipelineSystem`): ragexp's own chunk -> index -> retrieve -> rerank -> generate over
  the dataset's corpus, run by `ragexp.run.pipeline.run` itself (the only system with `own = True`);
- `recorded` (`RecordedOutputs`): what a system already answered, read by `dataset=outputs`;
- `python` (`PythonSystem`): a function `module:function(question, params)`;
- `http` (`ragexp.components.http_system.HttpSystem`): a service that takes a JSON POST.

`respond(question) -> Output` is called once per question (`concurrency` at once); a question
whose system fails raises QuestionFailed (its reason is recorded, the run goes on); a setting to fix
raises RagexpError. `settings()` is what the system's answers are cached under (its params and its
declared `version`), None for a system whose answers are not cached (recorded ones)."""
from __future__ import annotations

import math
import threading
import time
from collections import Counter
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from ragexp.base.settings import PositiveFloat, PositiveInt
from ragexp.components.user_functions import FUNCTION, GIVEN, called, import_function, takes_params
from ragexp.errors import QuestionFailed, RagexpError, UserCodeStopped
from ragexp.types import Answer, Chunk, Dataset, Hit, Output, Question

TEXT_KEYS = ("text", "content", "page_content", "chunk")  # a context object's text, first one set
ID_KEYS = ("doc_id", "id", "document_id", "source")  # its document id


@dataclass(frozen=True)
class SystemOutput:
    """What your system returns for a question (`system=python`): the answer and the contexts it
    used, best first: strings, or dicts with `text` and optionally `doc_id` and `score`. A dict
    with the keys `answer` and `contexts` is read the same way."""

    answer: str | None
    contexts: Sequence[Any] = field(default_factory=tuple)


class ContextError(ValueError):
    """Contexts that cannot be read (the message names what is wrong)."""


def hits_from_contexts(contexts: Any) -> tuple[Hit, ...]:
    """Contexts (a list of strings, or of objects with a text and optionally a document id and a
    score) as Hits ranked 1, 2, ...; a context without a document id gets `context-<rank>`."""
    if contexts is None:
        return ()
    if isinstance(contexts, (str, bytes)) or not isinstance(contexts, (list, tuple)):
        raise ContextError(f"contexts must be a list (of strings or of objects with a text), got {type(contexts).__name__}")
    hits = []
    for rank, context in enumerate(contexts, start=1):
        text: str | None
        if isinstance(context, str):
            text, doc_id, score = context, None, None
        elif isinstance(context, Mapping):
            text = next((context[k] for k in TEXT_KEYS if isinstance(context.get(k), str)), None)
            if text is None:
                raise ContextError(f"context {rank} has no text (one of the keys {', '.join(TEXT_KEYS)})")
            doc_id = next((context[k] for k in ID_KEYS if isinstance(context.get(k), (str, int))
                           and not isinstance(context.get(k), bool) and context.get(k) != ""), None)
            score = context.get("score")
            if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                                      or not math.isfinite(score)):  # NaN or Infinity: no standard JSON writes it
                raise ContextError(f"context {rank}: score must be a finite number, got {score!r}")
        else:
            raise ContextError(f"context {rank} is {type(context).__name__}, not a string or an object with a text")
        doc = str(doc_id) if doc_id is not None else f"context-{rank}"
        hits.append(Hit(Chunk(f"{doc}#{rank}", doc, text), float(score) if score is not None else 0.0, rank))
    return tuple(hits)


def output_of(value: Any, answer_required: bool = True) -> Output:
    """A system's reply (a SystemOutput, or a mapping with `answer` and `contexts`) as an Output;
    QuestionFailed naming the field that is missing or wrong."""
    if isinstance(value, SystemOutput):
        answer, contexts = value.answer, value.contexts
    elif isinstance(value, str):  # the answer alone (an MLflow predict_fn's habit): no contexts to judge it by
        answer, contexts = value, ()
    elif isinstance(value, Mapping):
        if "answer" not in value and answer_required:
            raise QuestionFailed(f"system: the reply has no 'answer' (it has {', '.join(map(str, value)) or 'no keys'})")
        answer, contexts = value.get("answer"), value.get("contexts", ())
    else:
        raise QuestionFailed(f"system: returned {type(value).__name__}; return a dict with 'answer' and 'contexts', "
                             "a ragexp.SystemOutput, or the answer as text")
    if answer is not None and not isinstance(answer, str):
        raise QuestionFailed(f"system: the answer is {type(answer).__name__}, not text")
    try:
        hits = hits_from_contexts(contexts)
    except ContextError as err:
        raise QuestionFailed(f"system: {err}") from None
    return Output(Answer(answer) if answer is not None else None, hits)


class System:
    """The contract (see the module's docstring)."""

    name: str = "system"
    own: bool = False
    concurrency: int = 1

    def start(self, dataset: Dataset) -> list[str]:
        """Sees the dataset once before any question; returns notes for the run's summary. A system
        that answers by itself ignores answers recorded in the dataset, and says so."""
        recorded = sum(o.answer is not None or bool(o.hits) for o in dataset.outputs.values())
        if recorded:
            return [f"system={self.name} answers the questions itself: the answers and contexts recorded in "
                    f"{dataset.name} ({recorded} rows) are ignored"]
        return []

    def settings(self) -> dict | None:
        return None

    def asked(self, question: Question) -> tuple:
        """What of a question the system is given (with `settings`, its answer's cache key)."""
        return (question.text,)

    def respond(self, question: Question) -> Output:
        raise NotImplementedError

    def counters(self) -> dict[str, int]:
        """Work counts for the run's summary and run.json (requests, retries, failures, ...)."""
        return {}

    def close(self) -> None:
        """Lets go of what `start` opened (connections)."""


class PipelineSystem(System):
    """ragexp's own pipeline over the dataset's corpus: its chunker, embedder, retriever and
    generator groups (composed under conf/system/pipeline.yaml) are run by `ragexp.run.pipeline.run`."""

    own = True
    name = "pipeline"


class RecordedOutputs(System):
    """The answers and contexts a system already produced, as `dataset=outputs` read them: nothing
    is chunked, indexed, retrieved or generated."""

    name = "recorded"

    def __init__(self):
        self.outputs: dict[str, Output] = {}

    def start(self, dataset: Dataset) -> list[str]:
        if not dataset.outputs:
            raise RagexpError(f"system=recorded: {dataset.name} holds no recorded outputs; use dataset=outputs "
                              "dataset.path=FILE (question, contexts, answer per row)")
        self.outputs = dict(dataset.outputs)
        answered = sum(o.answer is not None for o in self.outputs.values())
        return [] if answered else [f"retrieval only: no row of {dataset.name} has an answer; nothing is judged"]

    def respond(self, question: Question) -> Output:
        return self.outputs[question.qid]


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

    def __init__(self, function: str | None = None, params: Mapping[str, Any] | None = None, version: str = "1",
                 concurrency: PositiveInt = 1, name: str | None = None, timeout_s: PositiveFloat | None = None,
                 workers: Literal["threads", "processes"] = "threads"):
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
            from ragexp.components.system_workers import Workers

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
