"""Ties in a ranking: scores equal to TIE_DIGITS significant digits are ordered by chunk id, on every CPU."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ragexp.types import Chunk


TIE_DIGITS = 5  # scores equal to 5 significant digits are a tie, ordered by chunk id (see `best_first`)


def rounded(scores: np.ndarray) -> np.ndarray:
    """`scores` rounded to `TIE_DIGITS` significant digits: scores that differ only in their last
    bits (a float32 and a float64 path, the order of a sum) fall together, so that every retriever
    orders them the same way, by chunk id."""
    scores = np.asarray(scores, dtype=np.float64)
    magnitude = np.floor(np.log10(np.abs(scores), where=scores != 0, out=np.zeros_like(scores)))
    scale = 10.0 ** (TIE_DIGITS - 1 - magnitude)
    return np.round(scores * scale) / scale


def id_ranks(chunks: Sequence[Chunk]) -> np.ndarray:
    """Each chunk's place among the chunks sorted by id: the order of tied scores."""
    ranks = np.empty(len(chunks), dtype=np.int64)
    ranks[np.argsort(np.array([c.chunk_id for c in chunks]), kind="stable")] = np.arange(len(chunks))
    return ranks


def best_first(scores: np.ndarray, limit: int, ranks: np.ndarray) -> np.ndarray:
    """The indices of the `limit` highest scores, best first; scores equal to `TIE_DIGITS`
    significant digits in the order of `ranks` (`id_ranks`: chunk id order), without sorting every
    score: only those within one rounding step of the `limit`-th best are looked at."""
    if limit >= len(scores):
        return np.lexsort((ranks, -rounded(scores)))
    threshold = float(scores[np.argpartition(-scores, limit - 1)[limit - 1]])
    near = np.flatnonzero(scores >= threshold - abs(threshold) * 10.0 ** (1 - TIE_DIGITS))
    key, cut = rounded(scores[near]), rounded(np.array([threshold]))[0]
    above, tied = near[key > cut], near[key == cut]
    above = above[np.lexsort((ranks[above], -key[key > cut]))]
    need = limit - len(above)
    if need < len(tied):
        tied = tied[np.argpartition(ranks[tied], need - 1)[:need]]
    return np.concatenate([above, tied[np.argsort(ranks[tied])]])


def in_tie_order(scored: Sequence[tuple[Chunk, float]], limit: int) -> list[tuple[Chunk, float]]:
    """`(chunk, score)` pairs best first, cut at `limit`, ties as `best_first` orders them."""
    order = best_first(np.array([s for _, s in scored], dtype=np.float64), limit, id_ranks([c for c, _ in scored]))
    return [scored[i] for i in order]
