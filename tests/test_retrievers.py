"""Retrievers on a small real corpus: BM25 (rank-bm25), dense (MiniLM in Qdrant local mode), hybrid (RRF)."""
import pytest

from ragexp.components.retrievers import BM25Retriever, HybridRetriever, Retriever
from ragexp.types import Chunk, Hit
from ragexp.config.build import from_yaml

CHUNKS = [
    Chunk("port#0", "port", "The Quarry server listens on port 7400 by default."),
    Chunk("dlq#0", "dlq", "Jobs that fail five times are moved to the dead-letter queue."),
    Chunk("auth#0", "auth", "Clients authenticate with a bearer token in the Authorization header."),
    Chunk("cron#0", "cron", "Recurring jobs are declared with a cron expression such as 0 3 * * *."),
    Chunk("k8s#0", "k8s", "The Helm chart deploys Quarry as a StatefulSet on Kubernetes."),
]


def test_bm25_ranks_the_chunk_with_the_query_terms_first():
    retriever = from_yaml("retriever/bm25", top_k=3)
    retriever.index(CHUNKS)
    [hits] = retriever.search(["Which port does the server listen on?"])
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].chunk.chunk_id == "port#0"
    assert hits[0].score > hits[1].score


def test_dense_finds_paraphrases_in_qdrant_local_mode(minilm):
    retriever = from_yaml("retriever/dense", embedder=minilm, top_k=2)
    retriever.index(CHUNKS)
    results = retriever.search(["How do I log in to the API?", "Where do failing tasks end up after retries?"])
    assert [hits[0].chunk.chunk_id for hits in results] == ["auth#0", "dlq#0"]
    assert all(len(hits) == 2 and hits[0].score >= hits[1].score for hits in results)
    assert 0 < results[0][0].score <= 1.0  # cosine


class Fixed(Retriever):
    """A retriever with a fixed ranking, to check the fusion arithmetic by hand."""

    def __init__(self, order):
        self.order = order

    def index(self, chunks):
        self.by_id = {c.chunk_id: c for c in chunks}

    def search(self, queries, depth=None):
        return [[Hit(self.by_id[cid], 1.0, rank) for rank, cid in enumerate(self.order, 1)] for _ in queries]


def test_hybrid_is_weighted_reciprocal_rank_fusion():
    dense = Fixed(["port#0", "dlq#0", "auth#0"])
    bm25 = Fixed(["dlq#0", "cron#0", "port#0"])
    hybrid = from_yaml("retriever/hybrid", retrievers={"dense": dense, "bm25": bm25}, top_k=3, k=60, weights={"dense": 0.7, "bm25": 0.3})
    hybrid.index(CHUNKS)
    [hits] = hybrid.search(["q"])
    expected = {
        "port#0": 0.7 / 61 + 0.3 / 63,
        "dlq#0": 0.7 / 62 + 0.3 / 61,
        "auth#0": 0.7 / 63,
        "cron#0": 0.3 / 62,
    }
    best = sorted(expected, key=expected.get, reverse=True)[:3]
    assert [h.chunk.chunk_id for h in hits] == best
    assert [h.score for h in hits] == pytest.approx([expected[c] for c in best])


def test_hybrid_fuses_any_number_of_retrievers_equal_weights_by_default():
    first, second, third = Fixed(["port#0", "dlq#0"]), Fixed(["dlq#0", "port#0"]), Fixed(["cron#0", "dlq#0"])
    hybrid = from_yaml("retriever/hybrid", retrievers={"a": first, "b": second, "c": third}, top_k=3, k=60)
    hybrid.index(CHUNKS)
    [hits] = hybrid.search(["q"])
    third_of = 1 / 3
    expected = {"dlq#0": third_of * (1 / 62 + 1 / 61 + 1 / 62), "port#0": third_of * (1 / 61 + 1 / 62),
                "cron#0": third_of / 61}
    assert [h.chunk.chunk_id for h in hits] == ["dlq#0", "port#0", "cron#0"]
    assert [h.score for h in hits] == pytest.approx([expected[c] for c in ("dlq#0", "port#0", "cron#0")])


def test_hybrid_members_are_configured_retriever_options():
    from hydra.utils import instantiate

    from conftest import compose

    cfg = compose("retriever=hybrid", "embedder=hash", "+retriever@retriever.retrievers.strict=bm25",
                  "retriever.retrievers.strict.k1=0.5", "+retriever.weights.strict=0.2")
    hybrid = instantiate(cfg.retriever)
    assert list(hybrid.retrievers) == ["dense", "bm25", "strict"]
    assert isinstance(hybrid.retrievers["strict"], BM25Retriever) and hybrid.retrievers["strict"].k1 == 0.5
    assert hybrid.weights == {"dense": 0.5, "bm25": 0.5, "strict": 0.2}


def test_hybrid_of_real_retrievers_returns_top_k(minilm):
    hybrid = from_yaml("retriever/hybrid", retrievers={"dense": from_yaml("retriever/dense", embedder=minilm), "bm25": from_yaml("retriever/bm25")}, top_k=4)
    hybrid.index(CHUNKS)
    [hits] = hybrid.search(["default port of the server"])
    assert len(hits) == 4 and hits[0].chunk.chunk_id == "port#0"


def test_bad_settings_name_the_key():
    from conftest import compose
    from ragexp.validation import problems

    assert problems(compose("retriever=bm25", "retriever.top_k=0")) == ["retriever.top_k: must be >= 1, got 0"]
    assert HybridRetriever.constraints({"dense": None, "bm25": None}, weights={"sparse": 1.0}) == [
        "weights.sparse: no retriever 'sparse' in retrievers (dense, bm25)"]
    assert problems(compose("retriever=hybrid", "embedder=hash", "+retriever.weights.sparse=1.0")) == [
        "retriever.weights.sparse: no retriever 'sparse' in retrievers (dense, bm25)"]
    assert problems(compose("retriever=hybrid", "embedder=hash", "retriever.retrievers.bm25.top_k=0",
                            "+retriever.retrievers.x=3")) == [
        "retriever.retrievers.bm25.top_k: must be >= 1, got 0",
        "retriever.retrievers.x: expected a Retriever config with a _target_, got 3"]


def test_repeated_chunk_texts_come_out_in_chunk_id_order_in_every_retriever():
    """Equal texts score equally (up to the last float bits, which differ between Qdrant's and numpy's
    paths): every retriever orders them by chunk id, so dense and dense_exact give the same rankings."""

    texts = ["the proxy listens on port 7070", "retry the queue lease", "a cron schedule for the backup"]
    ids = ["k9", "b2", "x1", "a7", "m3", "c5", "z0", "d4", "q8"]  # not in id order: the order is the ids'
    chunks = [Chunk(cid, f"doc-{cid}", texts[i % 3]) for i, cid in enumerate(ids)]
    dense = from_yaml("retriever/dense", embedder=from_yaml("embedder/hash", dimension=64))
    retrievers = {"dense": dense, "dense_exact": from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash", dimension=64)),
                  "bm25": from_yaml("retriever/bm25")}
    retrievers["hybrid"] = from_yaml("retriever/hybrid", retrievers={"dense": from_yaml("retriever/dense", embedder=from_yaml("embedder/hash", dimension=64)), "bm25": from_yaml("retriever/bm25")})
    queries = ["which port does the proxy listen on", "queue lease retry", "backup"]
    rankings = {}
    for name, retriever in retrievers.items():
        retriever.index(chunks)
        rankings[name] = [[h.chunk.chunk_id for h in hits] for hits in retriever.search(queries, depth=9)]
    for name, ranked in rankings.items():
        for query, order in zip(queries, ranked):
            texts_in_order = [next(c.text for c in chunks if c.chunk_id == cid) for cid in order]
            for text in texts:  # each group of equal texts, where it stands: in id order
                group = [cid for cid, t in zip(order, texts_in_order) if t == text]
                assert group == sorted(group), (name, query, order)
    assert rankings["dense"] == rankings["dense_exact"]
    assert rankings["bm25"][0][:3] == ["a7", "k9", "z0"]  # the port chunks, ids ordered
