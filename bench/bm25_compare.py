"""Bench group `bm25s`: does `retriever.impl=bm25s` rank like `rank_bm25`, and how much faster is it?

Quality: the pipeline's own chunking, retrieval and retrieval metrics on HotpotQA dev500
(../shared/data/hotpotqa_ircot_dev500, the default chunker, 50 hits per question as the metrics
see them), once per implementation, in this process:

    python -m ragexp dataset=hotpotqa retriever=bm25 retriever.impl=bm25s|rank_bm25 ...

and where their rankings differ, why: the number of questions whose 50 hits differ, whose top 10
differ, and per question the first differing rank's cause: a term in more than half of the chunks
(rank-bm25 floors its negative idf at 0.25 x the mean idf, bm25s at 0), or float32 vs float64
rounding between scores that are equal in exact arithmetic (scores within 1e-5).

Speed: both implementations at 10^5 chunks, 1,000 queries (rank_bm25: a sample of queries,
extrapolated), from bench/million.py (`build_corpus`); 10^6 chunks are in group `million`.

    python bench/run.py bm25s   (this module is bench/bm25_compare.py: a bench/bm25s.py would hide the package)
    python bench/bm25_compare.py   (the quality part alone, printed)"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def rankings(impl: str):
    """The pipeline's chunks, retriever (indexed) and rankings of HotpotQA dev500 with `impl`,
    with each question's retrieval metrics."""
    from ragexp.config.build import components
    from ragexp.run.pipeline import retrieval_scored
    from ragexp.run.work import load

    cfg = compose(["dataset=hotpotqa", f"dataset.path={HOTPOT}", "retriever=bm25", f"retriever.impl={impl}",
                   "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none"])
    c = components(cfg)
    dataset = load(c.loader)
    chunks = c.chunker.chunk(dataset.documents)
    depth = max(c.retriever.top_k, c.metric_set.depth)
    c.retriever.index(chunks)
    ranked = c.retriever.search([q.text for q in dataset.questions], depth)
    c.rule.prepare(chunks)
    scored = [retrieval_scored(c, q, hits) for q, hits in zip(dataset.questions, ranked)]
    return c.retriever, dataset.questions, ranked, scored


def quality() -> dict:
    from ragexp.base.text import words

    figures: dict = {}
    runs = {impl: rankings(impl) for impl in ("bm25s", "rank_bm25")}
    for impl, (_, _, _, scored) in runs.items():
        kept = [r.retrieval for r in scored if r.retrieval]
        figures[impl] = {m: round(float(np.mean([r[m] for r in kept])), 4) for m in ("ndcg@10", "mrr", "recall@10")}
    figures["ndcg@10_difference"] = round(figures["bm25s"]["ndcg@10"] - figures["rank_bm25"]["ndcg@10"], 4)
    fast, questions, fast_ranked, _ = runs["bm25s"]
    slow, _, slow_ranked, _ = runs["rank_bm25"]
    common = {t for t, i in fast._model.vocab_dict.items() if
              np.diff(fast._model.scores["indptr"])[i] > len(fast.chunks) / 2}
    causes = {"common_term": 0, "rounding_tie": 0, "other": 0}
    differ_50 = differ_10 = 0
    for q, a, b in zip(questions, fast_ranked, slow_ranked):
        ids_a, ids_b = [h.chunk.chunk_id for h in a], [h.chunk.chunk_id for h in b]
        if ids_a == ids_b:
            continue
        differ_50 += 1
        differ_10 += ids_a[:10] != ids_b[:10]
        if common & set(words(q.text)):
            causes["common_term"] += 1
            continue
        at = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b)) if x != y)
        scores = slow.scores(q.text)
        by_id = {c.chunk_id: i for i, c in enumerate(slow.chunks)}
        gap = abs(scores[by_id[ids_a[at]]] - scores[by_id[ids_b[at]]])
        causes["rounding_tie" if gap < 1e-5 else "other"] += 1
    figures.update(chunks=len(fast.chunks), questions=len(questions), rankings_differ_50=differ_50,
                   rankings_differ_top10=differ_10, terms_in_over_half=sorted(common), causes=causes)
    return figures


def measure(work_dir: Path, args) -> dict:
    from million import QUERY_SAMPLE, child, extrapolated

    load = os.getloadavg()[0]
    figures = {"quality": quality(), "quality_load_1min_start": round(load, 1)}
    fast = child("bm25s", "--chunks", "100000", "--queries", "1000")
    slow = extrapolated(child("rank_bm25", "--chunks", "100000", "--queries", str(QUERY_SAMPLE)))
    fast_total = fast["index_s"] + fast["search_s"]
    slow_total = slow["index_s"] + slow["search_s_extrapolated_1000"]
    figures["speed_1e5"] = {"bm25s": fast, "rank_bm25": slow,
                            "speedup_index_plus_1000_queries": round(slow_total / fast_total, 1),
                            "speedup_per_query": round(slow["ms_per_query"] / fast["ms_per_query"], 1)}
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(quality(), indent=2))
