"""What flows through a synth run: sources (one chunk, or two for multi-hop), candidates, rejections."""
from __future__ import annotations

from dataclasses import dataclass, field

from ragexp.types import Chunk


@dataclass(frozen=True)
class Source:
    """What one candidate question is made from: its type and its chunk(s) (two, from different
    documents, for multi-hop)."""

    type: str
    chunks: tuple[Chunk, ...]

    @property
    def doc_ids(self) -> list[str]:
        return list(dict.fromkeys(c.doc_id for c in self.chunks))

    @property
    def text(self) -> str:
        return "\n\n".join(c.text for c in self.chunks)


@dataclass(frozen=True)
class Candidate:
    """A generated question with its expected answer, evidence (verbatim quotes of the source,
    which also serve `relevance=span`), the generator that made it and its prompt hash."""

    source: Source
    question: str
    answer: str
    evidence: tuple[str, ...] = ()
    generator: str = ""
    prompt_hash: str = ""
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rejection:
    """A source that gave no usable question: the rule that rejected it and why."""

    reason: str
    source: Source
    detail: str = ""
    candidate: Candidate | None = None

    def record(self) -> dict:
        record = {"reason": self.reason, "detail": self.detail, "type": self.source.type,
                  "chunk_ids": [c.chunk_id for c in self.source.chunks], "doc_ids": self.source.doc_ids}
        if self.candidate is not None:
            record.update(question=self.candidate.question, answer=self.candidate.answer)
        return record


class NoCandidate(Exception):
    """The generator made nothing from a source; `reason` is the rule name, the message the detail."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(detail or reason)
        self.reason, self.detail = reason, detail
