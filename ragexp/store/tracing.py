"""`tracing=on`: each question of a run recorded as a trace while it runs: spans `retrieve`,
`generate` and `judge`, and inside them one span per LLM request (inputs, outputs, times, tokens,
cost, cache hit or miss, the failure reason). The run keeps them in memory and writes them to its
folder as `traces.jsonl` (plain data); the MLflow tracker turns that file into MLflow traces when it
logs the folder (`ragexp.store.trace_store`), so `python -m ragexp.track FOLDER` logs them later too.
No mlflow import here: recording costs a few dict writes per span."""
from __future__ import annotations

import hashlib
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from ragexp.base.settings import Fraction

TRACES = "traces.jsonl"  # in the run folder: one trace per line
_current = threading.local()  # the span the calling thread is in (for the LLM requests it makes)


class Tracing:
    """`enabled`: record traces; `sample_rate`: the share of questions traced, chosen by a hash of
    `seed` and the question id (the same questions whatever the order or the concurrency)."""

    def __init__(self, enabled: bool, sample_rate: Fraction, seed: int):
        self.enabled, self.sample_rate, self.seed = bool(enabled), float(sample_rate), int(seed)

    def keeps(self, qid: str) -> bool:
        digest = hashlib.sha256(f"{self.seed}\0{qid}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.sample_rate

    def recorder(self, questions) -> TraceRecorder | None:
        """A recorder for the sampled questions of a run, or None when tracing is off."""
        if not self.enabled:
            return None
        return TraceRecorder([q for q in questions if self.keeps(q.qid)])

    def send(self, folder, run_name: str) -> tuple[bool, str] | None:
        """The written run folder's traces sent beyond the folder and MLflow (tracing=otlp:
        ragexp.store.otlp_export): whether they all were and the line that says so; here nothing."""
        return None


class TraceRecorder:
    """The traces of one run: question id -> its spans (dicts), filled from the stage threads."""

    def __init__(self, questions):
        self.questions = {q.qid: q for q in questions}
        self.spans: dict[str, list[dict]] = {qid: [] for qid in self.questions}
        self._lock = threading.Lock()

    def add(self, qid: str, span: dict) -> dict:
        with self._lock:
            span["id"] = len(self.spans[qid]) + 1
            self.spans[qid].append(span)
        return span

    def batch(self, name: str, span_type: str, started_ns: int, ended_ns: int, per_question: dict[str, tuple]) -> None:
        """A stage that ran for every question at once (retrieval): each traced question gets a span
        of its share of the stage's wall time, from the stage's start (attribute `ragexp.batched`)."""
        share = (ended_ns - started_ns) // max(1, len(per_question))
        for qid, (inputs, outputs, attributes) in per_question.items():
            if qid in self.spans:
                self.add(qid, {"name": name, "type": span_type, "parent": None, "start_ns": started_ns,
                               "end_ns": started_ns + share, "inputs": inputs, "outputs": outputs,
                               "attributes": {**attributes, "ragexp.batched": len(per_question),
                                              "ragexp.stage_s": round((ended_ns - started_ns) / 1e9, 4)},
                               "error": ""})

    @contextmanager
    def span(self, qid: str, name: str, span_type: str, inputs: Any) -> Iterator[dict | None]:
        """A span of question `qid` around the block (None when the question is not traced); the
        LLM requests the block makes in this thread become its children. The block sets
        `outputs`, `attributes` and `error` on the dict it gets."""
        if qid not in self.spans:
            yield None
            return
        span = self.add(qid, {"name": name, "type": span_type, "parent": None, "start_ns": time.time_ns(),
                              "end_ns": 0, "inputs": inputs, "outputs": None, "attributes": {}, "error": ""})
        _current.span = (self, qid, span["id"])
        try:
            yield span
        except BaseException as err:
            span["error"] = span["error"] or f"{type(err).__name__}: {err}"
            raise
        finally:
            _current.span = None
            span["end_ns"] = time.time_ns()

    def records(self) -> list[dict]:
        """One plain-data record per traced question, in question order."""
        out = []
        for qid, spans in self.spans.items():
            if not spans:
                continue
            question = self.questions[qid]
            out.append({"question_id": qid, "question": question.text, "spans": spans,
                        "start_ns": min(s["start_ns"] for s in spans), "end_ns": max(s["end_ns"] for s in spans)})
        return out


@contextmanager
def llm_request(role: str, model: str, messages) -> Iterator[dict | None]:
    """A span for one LLM request, inside the span the calling thread is in (None when that thread
    records no span). The caller sets its reply, tokens, cost and cache hit in `attributes`."""
    where = getattr(_current, "span", None)
    if where is None:
        yield None
        return
    recorder, qid, parent = where
    span = {"name": f"{role} request", "type": "CHAT_MODEL", "parent": parent, "start_ns": time.time_ns(),
            "end_ns": 0, "inputs": {"messages": [{"role": r, "content": c} for r, c in messages]},
            "outputs": None, "attributes": {"mlflow.llm.model": model}, "error": ""}
    try:
        yield span
    except BaseException as err:
        span["error"] = f"{type(err).__name__}: {err}"
        raise
    finally:
        span["end_ns"] = time.time_ns()
        recorder.add(qid, span)


def in_this_span(fn):
    """`fn`, to run in another thread (the triad's parallel steps): the LLM requests it makes are
    still children of the span the calling thread is in."""
    where = getattr(_current, "span", None)

    def run():
        _current.span = where
        try:
            return fn()
        finally:
            _current.span = None
    return run


def documents(hits) -> list[dict]:
    """Hits as MLflow shows a retriever span's documents."""
    return [{"id": h.chunk.chunk_id, "page_content": h.chunk.text,
             "metadata": {"doc_uri": h.chunk.doc_id, "chunk_id": h.chunk.chunk_id, "rank": h.rank, "score": h.score}}
            for h in hits]


def ended(span: dict | None, result, outputs):
    """`result` (a QuestionResult), its stage's `span` given the stage's outputs and failure."""
    if span is not None:
        span["outputs"], span["error"] = outputs, result.failure
    return result
