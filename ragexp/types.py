"""The records that flow between pipeline stages: plain frozen dataclasses."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Document:
    doc_id: str
    text: str
    title: str = ""


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    answers: tuple[str, ...]
    golden: dict[str, int] = field(default_factory=dict)  # doc_id -> relevance grade
    kind: str = ""
    answerable: bool = True  # False: the corpus holds no answer; abstaining is correct (`answers` is empty)
    source: str = ""  # where the question comes from: "golden", "synthetic" (ragexp.synth), "" = not said
    attributes: dict[str, str] = field(default_factory=dict)  # other columns of its row (slices: `slices=[channel]`)
    id_from_row: bool = False  # its id was made from its row's place (q1, q2, ...): no id was given

    @property
    def expected(self) -> str:
        return self.answers[0] if self.answers else ""


@dataclass(frozen=True)
class Dataset:
    name: str
    documents: tuple[Document, ...]
    questions: tuple[Question, ...]
    skipped_documents: tuple[str, ...] = ()  # ids of empty documents left out of the corpus
    skipped_rows: tuple[str, ...] = ()  # "file:line: reason" of malformed rows left out (on_error=skip)
    notes: tuple[str, ...] = ()  # other facts about the data the loader reports with the run
    outputs: dict[str, Output] = field(default_factory=dict)  # qid -> what a system recorded (dataset=outputs)


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    doc_id: str
    text: str
    start: int = -1  # character offsets in the document, -1 when unknown
    end: int = -1


@dataclass(frozen=True)
class Hit:
    chunk: Chunk
    score: float
    rank: int  # 1-based


@dataclass(frozen=True)
class Answer:
    text: str
    latency_s: float = 0.0


@dataclass(frozen=True)
class Output:
    """What the system under test produced for one question: its answer (None: it gave none, a
    retrieval-only row) and the contexts it used, best first, as Hits (doc ids when it gave them)."""

    answer: Answer | None
    hits: tuple[Hit, ...] = ()


@dataclass(frozen=True)
class Judgement:
    """One question's scores, on the scale the judge defines (1-10 for the single-call judge, 0-1
    for the RAG triad), labelled with the judge's name, with the judge's reasoning beside them."""

    judge: str
    scores: dict[str, float]  # metric name -> score, e.g. {"faithfulness": 9.0, ...}
    # whether the answer states something the context does not support, for every judge (the run's
    # hallucination_rate is the share of questions where it is true); when the judge ran several
    # times, the share of repeats that found one. A share of unsupported claims is a score of its
    # own (`claim_hallucination_rate`), never this field. None: the judge makes no such verdict (a
    # rubric's criteria), so the run has no hallucination_rate.
    hallucination: bool | float | None
    reasoning: str
    details: dict[str, Any] = field(default_factory=dict)  # the judge's evidence for the table (claims, verdicts, ...)
    repeats: tuple[Judgement, ...] = ()  # each repeat's judgement when the judge ran more than once


@dataclass(frozen=True)
class FirstStage:
    """A reranked question's first-stage retrieval, kept beside the reranked one for the audit
    trail: the retriever's hits, the items the retrieval metrics scored, their values and the
    relevance judgements they used (as `QuestionResult`'s `ranked`, `ranking`, `retrieval`, `judged`)."""

    ranked: tuple[Hit, ...]
    ranking: tuple[str, ...]
    retrieval: dict[str, float]
    judged: dict[str, int]


@dataclass(frozen=True)
class QuestionResult:
    """One question's end state: judged (judgement set) or failed (failure set)."""

    question: Question
    hits: tuple[Hit, ...] = ()
    answer: Answer | None = None
    judgement: Judgement | None = None
    failure: str = ""
    retrieval: dict[str, float] = field(default_factory=dict)  # canonical metric name -> value, e.g. "ndcg@10"
    retrieval_excluded: str = ""  # why this question has no retrieval metrics (nothing relevant to find)
    generation: dict[str, float] = field(default_factory=dict)  # answer vs expected answers, scorecard
    ranked: tuple[Hit, ...] = ()  # every hit the retrieval metrics saw (`metrics.depth` deep), best first
    ranking: tuple[str, ...] = ()  # the items those metrics scored, best first (documents, or chunks for span)
    judged: dict[str, int] = field(default_factory=dict)  # the relevance judgements they used: item -> grade
    first_stage: FirstStage | None = None  # with a reranker: the retriever's own ranking and its metrics
    rerank_s: float | None = None  # with a reranker: seconds this question's reranking took (0 when cached)

    @property
    def status(self) -> str:
        """`judged`; `failed` (with its reason); or `retrieved`: no answer to judge (a retrieval-only
        question: its retrieval metrics are its result), which is not a failure."""
        return "judged" if self.judgement is not None else "failed" if self.failure or self.answer is not None else "retrieved"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


@dataclass(frozen=True)
class GateVerdict:
    """A quality gate applied to a run's aggregates: passed, or the thresholds it missed."""

    name: str
    passed: bool
    checks: tuple[str, ...]  # one line per threshold: "mrr = 0.412 >= 0.8: FAILED"
    # with a baseline: each compared metric's one-sided p-value before any correction (a sweep corrects
    # across its jobs too), and whether the thresholds alone passed
    regression: dict[str, float] = field(default_factory=dict)
    thresholds_passed: bool = True


@dataclass(frozen=True)
class RunResult:
    name: str
    aggregates: dict[str, float]
    questions: tuple[QuestionResult, ...]
    judge: str
    dataset_fingerprint: str
    notes: tuple[str, ...] = ()  # data problems found on the way (reported, not fatal)
    counters: dict[str, int] = field(default_factory=dict)  # work done vs served from cache
    timings: dict[str, float] = field(default_factory=dict)  # wall seconds per stage; <stage>_cpu: its CPU seconds
    scales: dict[str, tuple[float, float]] = field(default_factory=dict)  # aggregate -> (lowest, highest), when known
    statuses: dict[str, str] = field(default_factory=dict)  # aggregate -> good / ok / warning (specification targets)
    gate: GateVerdict | None = None
    aggregation: tuple = ()  # how each aggregate is made (ragexp.metrics.scoring.Aggregate), for aggregates.json
    relevance: dict[str, Any] = field(default_factory=dict)  # rule, level and NDCG gain of the retrieval metrics
    traces: tuple[dict, ...] = ()  # tracing=on: one record per traced question (ragexp.store.tracing)

    @property
    def warned(self) -> list[str]:
        """The aggregates rated `warning` against their targets (what decides when no gate is set)."""
        return [key for key, status in self.statuses.items() if status == "warning"]


# Plain-data codecs for the stage cache (ragexp.store.cache): each cached record to a JSON-able dict and
# back. Nothing but these fields is read, so a cache file can never run code.

def chunk_to_dict(chunk: Chunk) -> dict:
    return {"chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "text": chunk.text, "start": chunk.start, "end": chunk.end}


def chunk_from_dict(data: dict) -> Chunk:
    return Chunk(str(data["chunk_id"]), str(data["doc_id"]), str(data["text"]), int(data["start"]), int(data["end"]))


def hit_to_dict(hit: Hit) -> dict:
    return {"chunk": chunk_to_dict(hit.chunk), "score": hit.score, "rank": hit.rank}


def hit_from_dict(data: dict) -> Hit:
    return Hit(chunk_from_dict(data["chunk"]), float(data["score"]), int(data["rank"]))


def answer_to_dict(answer: Answer) -> dict:
    return {"text": answer.text, "latency_s": answer.latency_s}


def answer_from_dict(data: dict) -> Answer:
    return Answer(str(data["text"]), float(data["latency_s"]))


def output_to_dict(output: Output) -> dict:
    return {"answer": answer_to_dict(output.answer) if output.answer is not None else None,
            "hits": [hit_to_dict(h) for h in output.hits]}


def output_from_dict(data: dict) -> Output:
    if not isinstance(data["hits"], list):
        raise ValueError("hits must be a list")
    return Output(answer_from_dict(data["answer"]) if data["answer"] is not None else None,
                  tuple(hit_from_dict(h) for h in data["hits"]))


def judgement_to_dict(judgement: Judgement) -> dict:
    return {"judge": judgement.judge, "scores": dict(judgement.scores), "hallucination": judgement.hallucination,
            "reasoning": judgement.reasoning, "details": judgement.details,
            "repeats": [judgement_to_dict(r) for r in judgement.repeats]}


def judgement_from_dict(data: dict) -> Judgement:
    hallucination = data["hallucination"]
    if hallucination is not None and not isinstance(hallucination, (bool, int, float)):
        raise ValueError(f"hallucination is {type(hallucination).__name__}")
    if not isinstance(data["scores"], dict) or not isinstance(data["details"], dict):
        raise ValueError("scores and details must be objects")
    return Judgement(str(data["judge"]), {str(k): float(v) for k, v in data["scores"].items()}, hallucination,
                     str(data["reasoning"]), data["details"], tuple(judgement_from_dict(r) for r in data["repeats"]))


# record type -> (its name in a cache file, to dict, from dict)
CODECS: dict[type, tuple[str, Callable[[Any], dict], Callable[[dict], Any]]] = {Chunk: ("Chunk", chunk_to_dict, chunk_from_dict), Hit: ("Hit", hit_to_dict, hit_from_dict),
          Answer: ("Answer", answer_to_dict, answer_from_dict), Judgement: ("Judgement", judgement_to_dict, judgement_from_dict),
          Output: ("Output", output_to_dict, output_from_dict)}
