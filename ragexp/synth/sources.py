"""Where candidate questions come from. Chunks are drawn stratified by document and section:
documents take turns (in a seeded order), and inside a document its sections (Markdown headings)
take turns, so a large corpus is not judged on its first pages and no document gets more than
its share. A multi-hop source is a chunk and its nearest neighbour (embedding cosine) from
another document."""
from __future__ import annotations

import random
import re
from collections import defaultdict
from typing import Callable, Iterator, Sequence

import numpy as np

from ragexp.synth.candidates import Source
from ragexp.types import Chunk, Document

HEADING = re.compile(r"^#{1,6}\s+(.+)$", re.MULTILINE)


def section_of(chunk: Chunk, document: Document | None) -> str:
    """The last Markdown heading at or before the chunk's start ("" when there is none)."""
    if document is None or chunk.start < 0:
        return ""
    title = ""
    for match in HEADING.finditer(document.text):
        if match.start() > chunk.start:
            break
        title = match.group(1).strip()
    return title


def round_robin(groups: Sequence[Sequence]) -> list:
    """The first item of each group, then the second of each, ... (groups of unequal length)."""
    return [group[i] for i in range(max((len(g) for g in groups), default=0)) for group in groups if i < len(group)]


def stratified(chunks: Sequence[Chunk], documents: Sequence[Document], seed: int) -> list[Chunk]:
    """Every chunk once, documents taking turns and, inside a document, its sections taking turns;
    the order of documents, of sections and of chunks inside a section is seeded."""
    rng = random.Random(seed)
    by_id = {d.doc_id: d for d in documents}
    by_doc: dict[str, dict[str, list[Chunk]]] = defaultdict(lambda: defaultdict(list))
    for chunk in chunks:
        by_doc[chunk.doc_id][section_of(chunk, by_id.get(chunk.doc_id))].append(chunk)
    per_doc = []
    for doc_id in sorted(by_doc):
        sections = [list(s) for s in by_doc[doc_id].values()]
        for section in sections:
            rng.shuffle(section)
        rng.shuffle(sections)
        per_doc.append(round_robin(sections))
    rng.shuffle(per_doc)
    return round_robin(per_doc)


class SourcePlan:
    """Per question type, an endless-until-exhausted stream of sources in stratified order.
    `embedder` (the config's `embedder`) is used only when multi-hop questions are asked for."""

    def __init__(self, chunks: Sequence[Chunk], documents: Sequence[Document], seed: int, embedder=None,
                 neighbours: int = 5, usable: Callable[[Chunk], bool] | None = None):
        self.chunks, self.documents, self.seed = list(chunks), list(documents), seed
        self.usable = usable  # multi-hop pairs only of chunks the generator can use (cloze: a template fits)
        self.embedder, self.neighbours = embedder, neighbours
        self._streams: dict[str, Iterator[Source]] = {}

    def next(self, type_: str) -> Source | None:
        """The next source for `type_`, or None when every chunk (or pair) was offered."""
        if type_ not in self._streams:
            self._streams[type_] = self.pairs() if type_ == "multi_hop" else self.singles(type_)
        return next(self._streams[type_], None)

    def singles(self, type_: str) -> Iterator[Source]:
        offset = sum(map(ord, type_))  # each type its own seeded order, all of them stratified
        for chunk in stratified(self.chunks, self.documents, self.seed + offset):
            yield Source(type_, (chunk,))

    def pairs(self) -> Iterator[Source]:
        """Each chunk (stratified order) with its most similar unused chunk of another document,
        among its `neighbours` nearest usable ones; a chunk is in at most one pair."""
        order = stratified(self.chunks, self.documents, self.seed + 1)
        if len({c.doc_id for c in order}) < 2 or self.embedder is None:
            return
        pool = [c for c in self.chunks if self.usable is None or self.usable(c)]
        index = {c.chunk_id: i for i, c in enumerate(pool)}
        if not pool:
            return
        vectors = self.embedder.embed([c.text for c in pool])
        used: set[str] = set()
        for chunk in order:
            if chunk.chunk_id in used or chunk.chunk_id not in index:
                continue
            similarity = vectors @ vectors[index[chunk.chunk_id]]
            others = [i for i in np.argsort(-similarity, kind="stable") if pool[i].doc_id != chunk.doc_id]
            partner = next((pool[i] for i in others[: self.neighbours] if pool[i].chunk_id not in used), None)
            if partner is None:
                continue
            used.update((chunk.chunk_id, partner.chunk_id))
            yield Source("multi_hop", (chunk, partner))
