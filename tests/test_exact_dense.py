"""retriever=dense_exact: the chunk vectors as one matrix, queries by matrix product. It ranks like
retriever=dense (Qdrant's local mode), keeps the vectors once (the run's memo holds views of the
matrix), reads them from the embedding store on a later run, and stops on bad input with one line."""
import json

import numpy as np
import pytest

from conftest import compose, port_dataset, run_app
from ragexp.components.embedders import EmbeddingCache
from ragexp.components.retrievers.exact_dense import ExactDenseRetriever
from ragexp.errors import RagexpError
from ragexp.run.pipeline import run
from ragexp.types import Chunk
from ragexp.config.build import from_yaml

TOPICS = ["port", "token", "queue", "retry", "cron", "disk", "proxy", "cache", "index", "backup", "schedule", "lease"]


def corpus(n: int) -> list[Chunk]:
    """`n` distinct chunks that share words in varied proportions (distinct scores, few ties)."""
    rng = np.random.default_rng(7)
    texts = {" ".join(rng.choice(TOPICS, size=int(rng.integers(3, 9)))) + f" item{i}" for i in range(n)}
    return [Chunk(f"c{i}", f"d{i % 40}", text) for i, text in enumerate(sorted(texts))]


QUERIES = ["which port does the proxy use", "retry the queue lease", "cron schedule for backup",
           "disk cache index", "token", "nothing in common whatsoever"]


def test_it_ranks_like_the_qdrant_dense_retriever():
    chunks = corpus(300)
    qdrant, exact = from_yaml("retriever/dense", embedder=from_yaml("embedder/hash", dimension=64)), from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash", dimension=64))
    qdrant.index(chunks)
    exact.index(chunks)
    for ours, theirs in zip(exact.search(QUERIES, 20), qdrant.search(QUERIES, 20)):
        assert [h.rank for h in ours] == list(range(1, 21))
        assert [h.chunk.chunk_id for h in ours] == [h.chunk.chunk_id for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)


def test_a_depth_beyond_the_corpus_gives_every_chunk_and_equal_scores_keep_chunk_order():
    chunks = [Chunk("a", "a", "port 7400"), Chunk("b", "b", "the port is 7400"), Chunk("c", "c", "port 7400"),
              Chunk("d", "d", "a bearer token")]
    exact = from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash"), top_k=2)
    exact.index(chunks)
    [hits] = exact.search(["port 7400"], depth=50)
    assert [h.chunk.chunk_id for h in hits][:2] == ["a", "c"]  # the same text: a tie, in chunk order
    assert sorted(h.chunk.chunk_id for h in hits) == ["a", "b", "c", "d"] and [h.rank for h in hits] == [1, 2, 3, 4]
    assert hits[0].score == pytest.approx(1.0) and hits[0].score == hits[1].score > hits[2].score
    [default] = exact.search(["port 7400"])
    assert [h.chunk.chunk_id for h in default] == ["a", "c"]  # top_k


def test_blocks_of_queries_give_the_rankings_of_one_block():
    chunks = corpus(200)
    one, blocks = from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash")), from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash"))
    one.index(chunks)
    blocks.index(chunks)
    assert one.block_rows() >= len(QUERIES)
    blocks.block_rows = lambda: 4  # type: ignore[method-assign]  # 6 queries in blocks of 4 and 2
    assert blocks.search(QUERIES, 10) == one.search(QUERIES, 10)


def test_the_block_size_follows_block_mb():
    exact = from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash"), block_mb=1)
    exact.chunks = [Chunk("a", "a", "x")] * 100_000
    assert exact.block_rows() == 2**20 // (4 * 100_000)  # 2 queries of 100,000 float32 scores in 1 MB
    exact.chunks = exact.chunks * 10
    assert exact.block_rows() == 1


def test_the_vectors_sit_in_memory_once():
    chunks = corpus(50)
    with EmbeddingCache().building() as embeddings:
        embedder = from_yaml("embedder/hash")
    exact = from_yaml("retriever/dense_exact", embedder=embedder)
    exact.index(chunks)
    memo = embeddings.memo[embedder.key()]
    assert all(np.shares_memory(memo[c.text], exact.vectors) for c in chunks)
    assert not exact.vectors.flags.writeable  # a caller cannot change the memo's vectors through it
    again = embedder.embed([chunks[3].text, "a new text", chunks[3].text])
    assert np.array_equal(again[0], exact.vectors[3]) and np.array_equal(again[2], again[0])
    assert np.array_equal(again[1], from_yaml("embedder/hash").embed(["a new text"])[0])


def test_an_empty_corpus_is_one_line():
    with pytest.raises(RagexpError, match=r"^retriever: no chunks to index"):
        from_yaml("retriever/dense_exact", embedder=from_yaml("embedder/hash")).index([])


def test_a_later_run_reuses_the_stored_hits_and_embeddings(tmp_path):
    data, cache = port_dataset(tmp_path), tmp_path / "cache"

    def counters(*overrides: str) -> dict:
        return run(compose(f"dataset.path={data}", f"cache.dir={cache}", "embedder=hash",
                           "embedder@scoring_embedder=hash", "tracker=none", *overrides)).counters

    first = counters("retriever=dense_exact")
    assert first["hits_computed"] == 1 and first["index_embedded_texts"] > 0
    again = counters("retriever=dense_exact")
    assert again["hits_cached"] == 1 and again["index_embedded_texts"] == 0
    # another retriever over the same chunks and embedder: searched again, the chunk vectors from the store
    qdrant = counters("retriever=dense")
    assert qdrant["hits_computed"] == 1 and qdrant["index_embedded_texts"] == 0
    wider = counters("retriever=dense_exact", "retriever.block_mb=1")
    assert wider["hits_computed"] == 1 and wider["index_embedded_texts"] == 0


def test_a_run_and_a_bad_setting(tmp_path):
    data = port_dataset(tmp_path)
    args = ["retriever=dense_exact", f"dataset.path={data}", "embedder=hash", "embedder@scoring_embedder=hash",
            "tracker=none", f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run_app(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    [values] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert values["hit_rate_at_1"] == 1.0
    bad = run_app(*args, "retriever.block_mb=0", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert [ln for ln in bad.stderr.splitlines() if "retriever.block_mb" in ln] == [
        "ragexp: error: retriever.block_mb: must be >= 1, got 0"]


def test_hybrid_can_fuse_the_exact_index():
    from hydra.utils import instantiate

    cfg = compose("retriever=hybrid", "retriever@retriever.retrievers.dense=dense_exact", "embedder=hash")
    hybrid = instantiate(cfg.retriever)
    assert type(hybrid.retrievers["dense"]) is ExactDenseRetriever
    hybrid.index(corpus(60))
    [hits] = hybrid.search(["which port does the proxy use"])
    assert len(hits) == 5
