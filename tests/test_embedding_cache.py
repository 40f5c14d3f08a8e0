"""Embedding state is run-scoped: the embedders a run builds share one EmbeddingCache (a text costs
one model call per run), two runs in one process share nothing, and nothing is kept per process."""
import numpy as np

from conftest import compose
from ragexp.store.embedding_store import EmbeddingStore
from ragexp.components.embedders import EmbeddingCache, HashEmbedder
from ragexp.run.pipeline import run
from ragexp.config.build import from_yaml


class CountingHash(HashEmbedder):
    """The hash embedder, recording the texts each model call embeds."""

    calls: list

    def embed_batch(self, texts):
        self.calls.append(list(texts))
        return super().embed_batch(texts)


def counting_hash(calls: list, **settings) -> CountingHash:
    """embedder=hash (its YAML's settings, `settings` over them), recording its model calls in `calls`."""
    embedder = from_yaml("embedder/hash", _target_=CountingHash, **settings)
    embedder.calls = calls
    return embedder


def test_a_text_embedded_twice_in_a_run_costs_one_model_call():
    calls = []
    with EmbeddingCache().building() as embeddings:  # as run() builds its components
        chunker_side, judge_side = counting_hash(calls), counting_hash(calls)
    assert chunker_side.cache is embeddings and judge_side.cache is embeddings
    first = chunker_side.embed(["port 7400", "stderr logs"])
    second = judge_side.embed(["stderr logs", "port 7400", "stderr logs"])
    assert calls == [["stderr logs", "port 7400"]]  # one call, the longest text first
    assert np.array_equal(second[1], first[0]) and embeddings.stats["embedded_texts"] == 2
    # another dimension is another embedder key: its own vectors
    counting_hash(calls, dimension=16).embed(["port 7400"])
    assert len(calls) == 2


def test_embedders_built_outside_a_run_share_nothing():
    calls = []
    a, b = counting_hash(calls), counting_hash(calls)
    assert a.cache is not b.cache
    a.embed(["port 7400"])
    b.embed(["port 7400"])
    assert calls == [["port 7400"], ["port 7400"]]


def test_the_on_disk_store_serves_a_later_run(tmp_path):
    calls = []
    store = EmbeddingStore(str(tmp_path))
    with EmbeddingCache(store).building():
        first = counting_hash(calls)
    with EmbeddingCache(store).building() as later:
        second = counting_hash(calls)
    vector = first.embed(["port 7400"])
    assert np.array_equal(second.embed(["port 7400"]), vector) and len(calls) == 1
    assert later.stats["embedded_texts"] == 0


def test_two_runs_in_one_process_do_not_share_vectors_or_counters(tmp_path):
    cfg = compose("embedder=hash", "embedder@scoring_embedder=hash", "dataset.limit=4", "tracker=none",
                  "cache.enabled=false", f"cache.dir={tmp_path}")
    first, second = run(cfg, "first"), run(cfg, "second")
    # nothing carried over: the second run embeds (and counts) exactly what the first did
    assert first.counters["embedded_texts"] > first.counters["index_embedded_texts"] > 0
    assert second.counters == first.counters
    assert second.aggregates == first.aggregates
    assert not (tmp_path / "embeddings.sqlite").exists()  # cache.enabled=false: memory only


def test_vectors_from_the_memo_the_store_and_the_model_land_in_their_rows(tmp_path):
    calls = []
    store = EmbeddingStore(str(tmp_path))
    with EmbeddingCache(store).building():
        counting_hash(calls).embed(["stored a", "stored b"])  # an earlier run: on disk
    with EmbeddingCache(store).building() as later:
        embedder = counting_hash(calls)
    embedder.embed(["in memory"])
    texts = ["new", "stored b", "in memory", "new", "stored a", "stored b"]
    vectors = embedder.embed(texts)
    assert calls[-1] == ["new"] and later.stats["embedded_texts"] == 2  # only "in memory" and "new" by the model
    assert np.array_equal(vectors, from_yaml("embedder/hash").embed(texts))  # every row is its own text's vector
    assert not vectors.flags.writeable
    memo = later.memo[embedder.key()]
    assert np.shares_memory(memo["stored a"], vectors) and np.shares_memory(memo["new"], vectors)


def test_a_model_folder_is_keyed_by_its_content(tmp_path):
    """embedder.model_path: the embedding store's key and the stage cache's token follow the folder's
    content (new weights of the same size copied in place are another model); the packaged MiniLM
    keeps the key it always had."""
    from ragexp.components.embedders import SentenceTransformerEmbedder
    from ragexp.store.code_identity import key_of

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 4}')
    (folder / "model.safetensors").write_bytes(b"\x01" * 64)
    mine = from_yaml("embedder/minilm", model_path=str(folder))
    node = {"_target_": "ragexp.components.embedders.SentenceTransformerEmbedder", "model_path": str(folder)}
    before, token_before = mine.key(), key_of("hits", node)
    assert before == mine.key() and key_of("hits", node) == token_before  # read again: the same
    (folder / "model.safetensors").write_bytes(b"\x02" * 64)  # the same size, other weights
    assert mine.key() != before and key_of("hits", node) != token_before
    packaged = from_yaml("embedder/minilm", backend="torch")  # PyTorch's vectors keep the key they always had
    assert packaged.key() == f"sentence-transformers:{packaged.path()}"
    default = {"_target_": "ragexp.components.embedders.SentenceTransformerEmbedder", "model_path": None}
    assert SentenceTransformerEmbedder.cache_token(**{k: v for k, v in default.items() if k != "_target_"}) is None
