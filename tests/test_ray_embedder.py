"""embedder=ray on a local Ray cluster: Ray Data actors run the inner embedder's model, the vectors
land in the run's embedding store under the inner embedder's key, rounds are stored as they end."""
import json

import numpy as np
import pytest
from conftest import port_dataset, require_engine, run_cli

from ragexp.store.embedding_store import EmbeddingStore
from ragexp.components.embedders import EmbeddingCache
from ragexp.config.build import from_yaml

# the engines tier (.venv-engines has the ray extra; make test's .venv does not): skipped elsewhere, required
# there; asked for inside the tests, so that collecting this file in another tier skips nothing
pytestmark = [pytest.mark.process, pytest.mark.engines]

HASH = {"_target_": "ragexp.components.embedders.HashEmbedder", "dimension": 64, "name": "hash", "batch_size": 1024}
TEXTS = [f"component {n} listens on port {7400 + n} and retries {n % 7} times" for n in range(300)]


@pytest.fixture
def local_ray():
    require_engine("ray_data")
    import ray

    # address="local": a new instance of this test's own, never a cluster another process started here
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_data_embeds_into_the_same_store_in_rounds(tmp_path, local_ray):

    store = EmbeddingStore(str(tmp_path / "cache"))
    with EmbeddingCache(store).building():
        embedder = from_yaml("embedder/ray", inner=HASH, batch_size=120, ray_batch_size=50, concurrency=1)
    vectors = embedder.embed(TEXTS)
    assert embedder.rounds == 3  # 300 texts in rounds of 120, each stored as it ended
    expected = from_yaml("embedder/hash", dimension=64).embed(TEXTS)
    assert vectors.shape == (300, 64) and np.allclose(vectors, expected, atol=1e-6)
    assert embedder.key() == from_yaml("embedder/hash", dimension=64).key()
    assert len(store.get(embedder.key(), TEXTS)) == 300
    with EmbeddingCache(EmbeddingStore(str(tmp_path / "cache"))).building():
        again = from_yaml("embedder/ray", inner=HASH, batch_size=120)
    assert np.allclose(again.embed(TEXTS[:10]), expected[:10]) and again.rounds == 0  # from the store, no Ray job
    with EmbeddingCache(EmbeddingStore(str(tmp_path / "cache"))).building():
        local = from_yaml("embedder/hash", dimension=64)
    local.embed_batch = lambda texts: pytest.fail("a local run re-embedded what Ray stored")
    assert np.allclose(local.embed(TEXTS), expected)


def test_a_run_with_embedder_ray_retrieves_like_the_local_embedder(tmp_path):
    require_engine("ray_data")
    data = port_dataset(tmp_path)
    common = [f"dataset.path={data}", "retriever=dense", "embedder@scoring_embedder=hash", "tracker=none",
              f"cache.dir={tmp_path / 'cache'}"]
    on_ray = run_cli(*common, "embedder=ray", "embedder@embedder.inner=hash", "embedder.concurrency=1", "embedder.address=local",
                     f"hydra.run.dir={tmp_path / 'ray-run'}", cwd=tmp_path)  # a local Ray of the run's own
    assert on_ray.returncode == 0, on_ray.stderr[-3000:]
    assert "embedded by Ray Data" in (tmp_path / "ray-run" / "ragexp.log").read_text()
    local = run_cli(*common, "embedder=hash", f"hydra.run.dir={tmp_path / 'local-run'}", cwd=tmp_path)
    assert local.returncode == 0, local.stderr[-3000:]
    [ray_values] = json.loads((tmp_path / "ray-run" / "results.json").read_text()).values()
    [local_values] = json.loads((tmp_path / "local-run" / "results.json").read_text()).values()
    assert ray_values["ndcg_at_10"] == local_values["ndcg_at_10"]
