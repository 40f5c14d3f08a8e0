"""retriever.impl=bm25s|rank_bm25: the same BM25, two implementations; where they may differ and
that the stage cache keeps their hits apart."""

import numpy as np
import pytest
from conftest import compose, port_dataset

from ragexp.run.pipeline import run
from ragexp.components.retrievers import BM25Retriever, best_first
from ragexp.base.text import words
from ragexp.types import Chunk
from ragexp.config.build import from_yaml

CHUNKS = [
    Chunk("port#0", "port", "The Quarry server listens on port 7400 by default; the port is configurable."),
    Chunk("dlq#0", "dlq", "Jobs that fail five times are moved to the dead-letter queue."),
    Chunk("auth#0", "auth", "Clients authenticate with a bearer token in the Authorization header."),
    Chunk("cron#0", "cron", "Recurring jobs are declared with a cron expression such as 0 3 * * *."),
    Chunk("k8s#0", "k8s", "The Helm chart deploys Quarry as a StatefulSet on Kubernetes."),
    Chunk("twin#0", "twin", "Jobs that fail five times are moved to the dead-letter queue."),  # ties dlq#0
    Chunk("empty#0", "empty", "the of and"),  # only stop words: no tokens
]
QUERIES = ["Which port does the server listen on?", "where do failing jobs go", "Quarry jobs on Kubernetes",
           "nothing matches xyzzy", "port port port"]


def indexed(impl: str, chunks=CHUNKS) -> BM25Retriever:
    retriever = from_yaml("retriever/bm25", top_k=3, impl=impl)
    retriever.index(chunks)
    return retriever


def test_bm25s_scores_and_ranks_like_rank_bm25_ties_in_chunk_id_order():
    fast, slow = indexed("bm25s"), indexed("rank_bm25")
    for query in QUERIES:
        assert fast.scores(query) == pytest.approx(slow.scores(query), rel=1e-5, abs=1e-6)
    for a, b in zip(fast.search(QUERIES, depth=7), slow.search(QUERIES, depth=7)):
        assert [h.chunk.chunk_id for h in a] == [h.chunk.chunk_id for h in b]
    [tied] = fast.search(["failing jobs dead-letter queue"], depth=2)
    assert [h.chunk.chunk_id for h in tied] == ["dlq#0", "twin#0"] and tied[0].score == tied[1].score
    [nothing] = fast.search(["xyzzy"], depth=3)  # no term known: every score 0, chunk id order
    assert [h.chunk.chunk_id for h in nothing] == ["auth#0", "cron#0", "dlq#0"] and nothing[0].score == 0


def test_the_index_is_the_one_bm25s_builds_itself():
    """ragexp builds bm25s's score matrix with numpy passes; bm25s's own `index` (a Python loop
    per chunk) gives the same arrays."""
    import bm25s

    fast = indexed("bm25s")
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in (words(c.text) or ["\0"])] for c in CHUNKS]
    own = bm25s.BM25(k1=1.5, b=0.75, method="atire", idf_method="robertson")
    own.index((ids, vocab), show_progress=False)
    assert fast._model.vocab_dict == {t: i for t, i in own.vocab_dict.items() if t != ""}  # bm25s adds "" for empty queries
    for part in ("indices", "indptr"):
        assert np.array_equal(fast._model.scores[part], own.scores[part])
    assert fast._model.scores["data"] == pytest.approx(own.scores["data"], rel=1e-6)


def test_a_term_in_over_half_of_the_chunks_is_where_they_differ():
    """idf log((N - df + 0.5) / (df + 0.5)) is negative for a term in more than half of the chunks:
    rank-bm25 replaces it with 0.25 x the mean idf, bm25s with 0."""
    chunks = [Chunk(f"c{i}", f"c{i}", f"common word{i}") for i in range(4)] + [Chunk("r", "r", "rare")]
    fast, slow = indexed("bm25s", chunks), indexed("rank_bm25", chunks)
    assert not fast.scores("common").any()
    assert (slow.scores("common")[:4] > 0).all()
    assert fast.scores("rare") == pytest.approx(slow.scores("rare"), rel=1e-5)


def test_best_first_is_a_sort_by_score_then_chunk_id_cut_at_limit():
    rng = np.random.default_rng(7)
    for size in (1, 9, 200):
        scores = rng.integers(0, 4, size).astype(np.float32)  # many ties
        ranks = rng.permutation(size)  # the chunks' places in id order
        for limit in {1, 3, size // 2 or 1, size}:
            expected = sorted(range(size), key=lambda i: (-scores[i], ranks[i]))[:limit]
            assert best_first(scores, limit, ranks).tolist() == expected


def test_scores_that_differ_past_five_significant_digits_are_a_tie():
    scores = np.array([0.76149951, 0.7614995, 0.70001, 12345.61, 12345.6])
    ranks = np.array([4, 3, 2, 1, 0])
    assert best_first(scores, 5, ranks).tolist() == [4, 3, 1, 0, 2]
    assert best_first(scores, 2, ranks).tolist() == [4, 3]
    assert best_first(scores, 3, ranks).tolist() == [4, 3, 1]


def test_the_stage_cache_keeps_each_implementations_hits_apart(tmp_path):
    data, cache = port_dataset(tmp_path, docs=3, repeat=5), tmp_path / "cache"

    def counters(impl: str) -> dict:
        return run(compose(f"dataset.path={data}", f"cache.dir={cache}", "retriever=bm25", f"retriever.impl={impl}",
                           "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none")).counters

    assert counters("rank_bm25")["hits_computed"] == 1
    switched = counters("bm25s")
    assert switched["hits_computed"] == 1 and switched.get("hits_cached", 0) == 0 and switched["chunks_cached"] == 1
    assert counters("rank_bm25")["hits_cached"] == 1
    assert counters("bm25s")["hits_cached"] == 1


def test_an_unknown_impl_names_the_setting():
    from ragexp.validation import problems

    [problem] = problems(compose("retriever=bm25", "retriever.impl=lucene"))
    assert problem.startswith("retriever.impl:") and "bm25s" in problem and "rank_bm25" in problem
