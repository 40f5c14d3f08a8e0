"""Where retrieval fails, as a picture: the run's questions and the chunks they ranked, in the
retriever's embedding space, projected on 2 axes by PCA (deterministic: the SVD of the centred
vectors, each axis signed so that its largest loading is positive). Only vectors the run already
holds are used (its memo, then the on-disk store): nothing is embedded again. Above `LIMIT`
points the chunks are sampled (seeded); every question is kept. `embedding_map.json` holds the
points, `embedding_map.png` draws them twice: questions by hit or miss, and by judged score."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ragexp.types import QuestionResult

LIMIT = 10_000  # points drawn at most
SEED = 0


def known_vectors(embedder, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """The vectors of `texts` the run's embedding cache holds (memo, then store); no model call."""
    key, cache = embedder.key(), embedder.cache
    memo = cache.memo.get(key, {})
    found = {t: memo[t] for t in texts if t in memo}
    missing = [t for t in dict.fromkeys(texts) if t not in found]
    if missing and cache.store is not None:
        found.update(cache.store.stored(key, missing))
    return found


def projected(vectors: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """2-D coordinates of the rows of `vectors` by PCA, and the share of variance each axis keeps."""
    centred = vectors.astype(np.float64) - vectors.mean(axis=0)
    u, s, vt = np.linalg.svd(centred, full_matrices=False)
    axes = min(2, len(s))
    signs = np.sign(vt[np.arange(axes), np.abs(vt[:axes]).argmax(axis=1)])
    coords = np.zeros((len(vectors), 2))
    coords[:, :axes] = u[:, :axes] * s[:axes] * signs
    total = float((s ** 2).sum()) or 1.0
    return coords, [round(float(v ** 2) / total, 4) for v in s[:2]]


def judged_score(result: QuestionResult, scales: dict[str, tuple[float, float]]) -> float | None:
    """The mean of the judge's scores of the question on 0-1 (each through its scale), or None."""
    if result.judgement is None:
        return None
    unit = [(v - scales[m][0]) / (scales[m][1] - scales[m][0]) for m, v in result.judgement.scores.items()
            if m in scales and scales[m][1] > scales[m][0]]
    return round(float(np.mean(unit)), 4) if unit else None


def hit(result: QuestionResult) -> bool | None:
    """Whether the question's top hits hold a relevant item (context_hit), None without golden data."""
    value = result.retrieval.get("context_hit")
    return None if value is None else bool(value)


def points(embedder, results: Sequence[QuestionResult], scales: dict[str, tuple[float, float]]) -> dict | None:
    """The map's points (JSON-able), or None when the retriever has no embedder (bm25) or the run
    holds no vectors of its questions."""
    if embedder is None or not results:
        return None
    chunk_texts = list(dict.fromkeys(h.chunk.text for r in results for h in (r.ranked or r.hits)))
    questions = list(dict.fromkeys(r.question.text for r in results))
    vectors = known_vectors(embedder, [*questions, *chunk_texts])
    asked = [r for r in results if r.question.text in vectors]
    if not asked:
        return None
    shown = [t for t in chunk_texts if t in vectors]
    room = max(0, LIMIT - len(asked))
    if len(shown) > room:
        shown = [shown[i] for i in sorted(np.random.default_rng(SEED).choice(len(shown), room, replace=False))]
    matrix = np.stack([vectors[r.question.text] for r in asked] + [vectors[t] for t in shown])
    coords, explained = projected(matrix)
    q, c = coords[: len(asked)], coords[len(asked):]
    return {
        "embedder": embedder.name, "explained_variance": explained, "chunks_shown": len(shown),
        "chunks_ranked": len(chunk_texts),
        "questions": [{"question_id": r.question.qid, "x": round(float(x), 5), "y": round(float(y), 5),
                       "hit": hit(r), "score": judged_score(r, scales)} for r, (x, y) in zip(asked, q)],
        "chunks": [[round(float(x), 5), round(float(y), 5)] for x, y in c],
    }


def draw(data: dict[str, Any], path: Path) -> Path:
    """`embedding_map.png`: the chunks in grey, the questions by hit (green) or miss (red, grey
    without golden data) on the left, by judged score (0-1) on the right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chunks = np.asarray(data["chunks"]).reshape(-1, 2)
    qs = data["questions"]
    xy = np.asarray([[q["x"], q["y"]] for q in qs])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.5), dpi=90)
    for ax in (left, right):
        ax.scatter(chunks[:, 0], chunks[:, 1], s=6, c="#c8c8c8", label=f"chunks ({len(chunks)})", linewidths=0)
        ax.set_xlabel(f"PC1 ({data['explained_variance'][0]:.0%} of the variance)")
        ax.set_ylabel(f"PC2 ({data['explained_variance'][-1]:.0%})")
    colours = {True: "#2a9d3f", False: "#d62728", None: "#7f7f7f"}
    names = {True: "hit", False: "miss", None: "no golden data"}
    for value in (True, False, None):
        chosen = [i for i, q in enumerate(qs) if q["hit"] is value]
        if chosen:
            left.scatter(xy[chosen, 0], xy[chosen, 1], s=28, c=colours[value], edgecolors="white", linewidths=0.5,
                         label=f"questions: {names[value]} ({len(chosen)})")
    left.set_title("Questions by retrieval hit (context_hit)")
    left.legend(loc="best", fontsize=8)
    scored = [i for i, q in enumerate(qs) if q["score"] is not None]
    if scored:
        points_ = right.scatter(xy[scored, 0], xy[scored, 1], s=28, c=[qs[i]["score"] for i in scored], cmap="viridis",
                                vmin=0, vmax=1, edgecolors="white", linewidths=0.5)
        fig.colorbar(points_, ax=right, label="judged score (the judge's metrics on 0-1, mean)")
    right.set_title("Questions by judged score")
    fig.suptitle(f"The questions and the chunks they ranked, embedded by {data['embedder']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
