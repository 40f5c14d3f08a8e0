"""Relevance across chunking: golden relevance is per document (graded) or per answer string;
retrieval returns chunks. A rule turns one question's retrieved chunks into a `Ranking` that
the retrieval metrics score (one YAML option under conf/relevance/ per rule)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Sequence

from ragexp.metrics.retrieval import UNJUDGED, Ranking
from ragexp.types import Chunk, Hit, Question
from ragexp.base.settings import PositiveInt


CONTEXT_METRICS = ("context_hit", "context_recall")  # of what the generator saw (Graded.context_scores)


@dataclass(frozen=True)
class Graded:
    """A question's ranking, or why it has none (`excluded`: nothing relevant to find), and its
    relevance judgements as a TREC qrels file holds them (`judged`: id -> grade)."""

    ranking: Ranking | None
    excluded: str = ""
    judged: dict[str, int] = field(default_factory=dict)

    def context_scores(self, ids: Sequence[str], level: int) -> dict[str, float]:
        """What the generator saw (`ids`: the items of its top_k chunks, documents or chunks):
        `context_hit` 1 when one of them is relevant, `context_recall` the share of the relevant
        items among them. Not ranking metrics: the order of the context does not count."""
        if self.ranking is None:
            return {}
        relevant = {i for i, g in self.judged.items() if g >= level}
        seen = relevant & set(ids)
        return {"context_hit": float(bool(seen)), "context_recall": len(seen) / len(relevant) if relevant else 0.0}


class RelevanceRule:
    name: str
    level: int = 1

    def prepare(self, chunks: Sequence[Chunk]) -> None:
        """Sees the whole chunked corpus once, before any question."""

    def grade(self, question: Question, hits: Sequence[Hit]) -> Graded:
        raise NotImplementedError

    def item(self, hit: Hit) -> str:
        """What the rule ranks: a hit's document (doc) or chunk (span)."""
        return hit.chunk.chunk_id


class DocRelevance(RelevanceRule):
    """`doc`: a document's rank is the rank of its best (first) retrieved chunk, and it keeps its
    golden grade; the ranked list of distinct documents is scored. Grades >= `level` count as
    relevant (trec_eval's -l); every judged document, retrieved or not, forms the ideal ranking.
    A question whose judged documents are all below `level` scores 0, as trec_eval scores it
    (`without_relevant: exclude` leaves it out of the means instead, counted as excluded); a
    question without judgements has nothing to score either way."""

    def __init__(self, level: PositiveInt, name: str,
                 without_relevant: Literal["score", "exclude"]):
        self.level, self.name, self.without_relevant = level, name, without_relevant

    def item(self, hit: Hit) -> str:
        return hit.chunk.doc_id

    def grade(self, question: Question, hits: Sequence[Hit]) -> Graded:
        if not question.golden:
            return Graded(None, "no golden documents")
        pool = tuple(g for g in question.golden.values() if g >= 0)
        if self.without_relevant == "exclude" and not any(g >= self.level for g in pool):
            return Graded(None, f"no golden document with grade >= {self.level}")
        docs = tuple(dict.fromkeys(hit.chunk.doc_id for hit in hits))
        grades = tuple(question.golden[d] if question.golden.get(d, UNJUDGED) >= 0 else UNJUDGED for d in docs)
        return Graded(Ranking(grades, pool, docs), judged=dict(question.golden))


def answer_pattern(answer: str) -> re.Pattern | None:
    """Matches `answer` as a whole-word phrase, case-insensitive, any whitespace between words."""
    words = answer.split()
    if not words:
        return None
    return re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in words) + r"(?!\w)", re.IGNORECASE)


class SpanRelevance(RelevanceRule):
    """`span`: a chunk is relevant (grade 1) when it contains one of the question's expected
    answer strings (case-insensitive, whole words, any whitespace); the ranked list of chunks is
    scored, and every chunk of the corpus that contains an answer forms the ideal ranking.
    Questions marked unanswerable, and answers found in no chunk, have nothing to find."""

    def __init__(self, name: str):
        self.name = name
        self.chunks: tuple[Chunk, ...] = ()

    def prepare(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = tuple(chunks)

    def grade(self, question: Question, hits: Sequence[Hit]) -> Graded:
        if not question.answerable:
            return Graded(None, "unanswerable question")
        patterns = [p for p in map(answer_pattern, question.answers) if p]
        if not patterns:
            return Graded(None, "no expected answer")
        relevant = {c.chunk_id for c in self.chunks if any(p.search(c.text) for p in patterns)}
        if not relevant:
            return Graded(None, "no chunk contains an expected answer")
        ids = tuple(hit.chunk.chunk_id for hit in hits)
        return Graded(Ranking(tuple(1 if cid in relevant else 0 for cid in ids), (1,) * len(relevant), ids),
                      judged=dict.fromkeys(sorted(relevant), 1))
