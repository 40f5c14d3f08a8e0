"""The system under test: who produces `(answer, contexts)` for each question (the `system` group).

One contract, `System`, so that judges, metrics, aggregation, the gate, the audit trail, tracing
and tracking never know which system ran:

- `pipeline` (`PipelineSystem`): ragexp's own chunk -> index -> retrieve -> rerank -> generate over
  the dataset's corpus, run by `ragexp.run.pipeline.run` itself (the only system with `own = True`);
- `recorded` (`RecordedOutputs`): what a system already answered, read by `dataset=outputs`;
- `python` (`PythonSystem`): a function `module:function(question, params)`;
- `http` (`ragexp.components.systems.http.HttpSystem`): a service that takes a JSON POST.

`respond(question) -> Output` is called once per question (`concurrency` at once); a question
whose system fails raises QuestionFailed (its reason is recorded, the run goes on); a setting to fix
raises RagexpError. `settings()` is what the system's answers are cached under (its params and its
declared `version`), None for a system whose answers are not cached (recorded ones)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ragexp.errors import QuestionFailed
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
