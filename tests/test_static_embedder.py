"""embedder=static (distilled once into the cache folder, reused), embedder.backend (numpy, ONNX
Runtime, OpenVINO), and cache keys that keep every embedder's and backend's vectors apart. The fast tests
distil a tiny BERT made here; distilling the packaged MiniLM is a slow test."""
import json
import logging

import numpy as np
import pytest

from conftest import compose, require_engine
from ragexp.components import static_embedder
from ragexp.store.embedding_store import EmbeddingStore
from ragexp.components.embedders import EmbeddingCache
from ragexp.components.embedders.static import StaticEmbedder
from ragexp.validation import problems
from ragexp.config.build import from_yaml

WORDS = ("port stderr logs worker queue restart backup restore cluster node token secret config file "
         "error code timeout retry job schedule disk memory cpu network proxy cache index search").split()
TEXTS = ["port stderr logs", "restart the worker queue", "backup and restore a cluster node", "timeout"]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny sentence-transformers BERT (random weights, 37-token WordPiece vocabulary) on disk."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder = tmp_path_factory.mktemp("teacher")
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(WORDS), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 32, "do_lower_case": False}))
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                  "pooling_mode_mean_tokens": True}))
    return str(folder)


@pytest.fixture
def distils(monkeypatch):
    """The distillations made during the test (each a call of the real `distil`), from a fresh process state."""
    calls = []
    real = static_embedder.distil
    monkeypatch.setattr(static_embedder, "distil", lambda *args: calls.append(args) or real(*args))
    static_embedder.load_static_model.cache_clear()
    yield calls
    static_embedder.load_static_model.cache_clear()


def static(teacher, cache_dir, **settings) -> StaticEmbedder:
    with EmbeddingCache(EmbeddingStore(str(cache_dir))).building():  # as a run with cache.dir=cache_dir builds it
        return from_yaml("embedder/static", teacher_path=teacher, pca_dims=settings.pop("pca_dims", 8), **settings)


def test_distilled_once_into_the_cache_folder_as_plain_data_then_reused(teacher, tmp_path, distils):
    first = static(teacher, tmp_path).embed(TEXTS)
    [folder] = (tmp_path / "models").iterdir()
    assert folder.name.startswith("static-") and len(distils) == 1
    assert {p.name for p in folder.iterdir()} >= {"model.safetensors", "tokenizer.json", "config.json"}
    assert all(p.suffix in (".safetensors", ".json", ".md") for p in folder.rglob("*") if p.is_file())  # no pickle
    static_embedder.load_static_model.cache_clear()  # as a new process: loads the folder, distils nothing
    again = static(teacher, tmp_path).embed_batch(TEXTS)  # the model's own vectors, not the stored ones
    assert len(distils) == 1 and np.allclose(again, first, atol=2e-3)  # stored in float16
    assert first.shape == (len(TEXTS), 8) and np.allclose(np.linalg.norm(first, axis=1), 1, atol=1e-5)


def test_without_an_on_disk_cache_the_model_is_kept_in_a_temporary_folder(teacher, distils):
    embedder = from_yaml("embedder/static", teacher_path=teacher, pca_dims=8)  # built outside a run: a memory-only cache
    embedder.embed(TEXTS)
    assert embedder.folder().is_dir() and embedder.folder().parent.parent.name.startswith("ragexp-models-")
    assert len(distils) == 1


def test_a_text_is_the_mean_of_its_tokens(teacher, tmp_path, distils):
    text, shuffled, other = static(teacher, tmp_path).embed(["port stderr logs", "logs port stderr", "restart the worker queue"])
    assert np.allclose(text, shuffled, atol=1e-6)  # word order does not matter to a static embedder
    assert not np.allclose(text, other, atol=1e-3)


def test_a_damaged_distilled_model_is_distilled_again(teacher, tmp_path, distils, caplog):
    first = static(teacher, tmp_path).embed(TEXTS)
    [folder] = (tmp_path / "models").iterdir()
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    static_embedder.load_static_model.cache_clear()
    with caplog.at_level(logging.WARNING):
        again = static(teacher, tmp_path).embed_batch(TEXTS)
    assert len(distils) == 2 and "unreadable" in caplog.text and np.allclose(again, first, atol=2e-3)  # stored in float16


def test_embedders_and_backends_never_share_cached_vectors(teacher, tmp_path, distils):
    with EmbeddingCache(EmbeddingStore(str(tmp_path))).building():
        embedders = [from_yaml("embedder/hash"), from_yaml("embedder/hash", dimension=8), from_yaml("embedder/static", teacher_path=teacher, pca_dims=8),
                     from_yaml("embedder/static", teacher_path=teacher, pca_dims=4), from_yaml("embedder/static", teacher_path=teacher, pca_dims=8, sif_coefficient=None),
                     *(from_yaml("embedder/minilm", model_path=teacher, backend=b)
                       for b in ("numpy", "torch", "onnx", "onnx-int8", "openvino"))]
    keys = [e.key() for e in embedders]
    assert len(set(keys)) == len(keys)
    store = EmbeddingStore(str(tmp_path))
    vectors = {}
    for embedder in embedders[:5]:  # in one store, each gets back only what it embedded itself
        vectors[embedder.key()] = embedder.embed(TEXTS)
        assert np.array_equal(store.get(embedder.key(), TEXTS)[TEXTS[0]], vectors[embedder.key()][0])
    assert [v.shape[1] for v in vectors.values()] == [384, 8, 8, 4, 8]
    assert not np.allclose(vectors[keys[2]], vectors[keys[4]])  # SIF weighting changes the vectors
    # the stage cache's retrieval key holds the embedder's settings, backend included
    assert compose("embedder.backend=onnx").retriever.embedder.backend == "onnx"
    assert compose("embedder=static").retriever.embedder._target_ == "ragexp.components.embedders.static.StaticEmbedder"


@pytest.mark.parametrize("pooling", ["mean_tokens", "cls_token", "max_tokens"])
def test_numpy_gives_pytorchs_vectors_pooled_as_the_model_says(teacher, tmp_path, pooling):
    """Another BERT than MiniLM (1 layer, 2 heads, random weights), pooled by each mode."""
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(teacher, folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                  f"pooling_mode_{pooling}": True}))
    torch, numpy = (from_yaml("embedder/minilm", model_path=str(folder), backend=b) for b in ("torch", "numpy"))
    texts = [*TEXTS, "", " ".join(WORDS * 3)]  # an empty text, one past max_seq_length (32)
    cosines = (torch.embed(texts) * numpy.embed(texts)).sum(axis=1)
    assert cosines.min() > 0.9999


@pytest.mark.engines
@pytest.mark.parametrize("backend", ["onnx", "onnx-int8", "openvino"])
def test_a_backend_gives_pytorchs_vectors(teacher, tmp_path, backend):
    require_engine("openvino" if backend == "openvino" else "onnx")
    with EmbeddingCache(EmbeddingStore(str(tmp_path))).building():
        torch, other = (from_yaml("embedder/minilm", model_path=teacher, backend=b) for b in ("torch", backend))
    cosines = (torch.embed(TEXTS) * other.embed(TEXTS)).sum(axis=1)
    assert cosines.min() > (0.9 if backend == "onnx-int8" else 0.9999)  # int8 weights: close, not equal
    assert [p.name for p in (tmp_path / "models").iterdir()][0].startswith("onnx-")


def test_the_static_option_validates_its_settings():
    assert problems(compose("embedder=static")) == []
    assert problems(compose("embedder=static", "embedder.sif_coefficient=2")) == [
        "embedder.sif_coefficient: must be < 1, got 2"]
    assert any("embedder.backend" in p for p in problems(compose("embedder.backend=tensorrt")))


@pytest.mark.slow
def test_the_packaged_minilm_distils_offline_and_retrieves(tmp_path):
    """Distils the packaged MiniLM (about a minute on 2 cores) and runs the sample with it."""
    from conftest import HASH
    from ragexp.run.pipeline import run

    cfg = compose("embedder=static", HASH[1], "tracker=none", f"cache.dir={tmp_path}", "dataset.limit=10")
    result = run(cfg)
    assert result.aggregates["hit_rate_at_5"] >= 0.5
    assert [p.name for p in (tmp_path / "models").iterdir()][0].startswith("static-")
