"""`embedder=ray`: the embedding stage on a Ray cluster, for corpora too large to embed on one machine.

The texts the run's embedding cache does not hold yet are embedded by Ray Data: a dataset of
(position, text) rows, `map_batches` over actors that each build the `inner` embedder once from its
config (plain data: every worker imports ragexp) and call its model on `ray_batch_size` texts at a
time. The vectors come back to this process and go into the same embedding store as a local run's,
under the inner embedder's key: a later run, local or on Ray, takes them from there. The texts are
sent in rounds of `batch_size`, each stored as it ends, so a stopped run keeps its finished rounds.

    python -m ragexp embedder=ray embedder.address=ray://head:10001 embedder@embedder.inner=minilm ...

See docs/how-to/scale.md for pointing it at a cluster and what it costs."""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ragexp.components.embedders import Embedder
from ragexp.errors import RagexpError
from ragexp.base.settings import NonNegativeFloat, PositiveInt

log = logging.getLogger(__name__)


class InnerEmbedder:
    """A Ray Data actor: the inner embedder built once per actor, its model called per batch."""

    def __init__(self, inner: dict):
        from hydra.utils import instantiate

        self.embedder = instantiate(inner)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = np.asarray(self.embedder.embed_batch([str(t) for t in batch["text"]]), dtype=np.float32)
        return {"position": batch["position"], "vector": vectors}


class RayEmbedder(Embedder):
    """The `inner` embedder's model run by Ray Data actors (see the module's docstring). `inner` is
    the embedder's config (kept as plain data: Hydra does not build it here, `_recursive_: false`);
    `address`: a Ray cluster (`auto`, `ray://head:10001`), null for $RAY_ADDRESS or a local Ray;
    `runtime_env`: Ray's runtime environment for the workers (e.g. pip packages, working_dir)."""

    def __init__(self, inner: Any, address: str | None, batch_size: PositiveInt,
                 ray_batch_size: PositiveInt, concurrency: PositiveInt, num_cpus: NonNegativeFloat,
                 num_gpus: NonNegativeFloat, runtime_env: dict | None, name: str | None):
        from omegaconf import DictConfig, OmegaConf

        self.inner = OmegaConf.to_container(inner, resolve=True) if isinstance(inner, DictConfig) else dict(inner)
        if not isinstance(self.inner, dict) or "_target_" not in self.inner:
            raise RagexpError("embedder.inner: give the config of the embedder to run on Ray (with its _target_)")
        from hydra.utils import instantiate

        self.local = instantiate(self.inner)  # its key and dimension; its model is never loaded here
        self.local.cache = self.cache
        self.address, self.runtime_env = address, runtime_env
        self.batch_size, self.ray_batch_size, self.concurrency = batch_size, ray_batch_size, concurrency
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.name = name or f"ray:{self.local.name}"
        self.rounds = 0  # Ray Data jobs run (one per `batch_size` texts not in the cache)

    def key(self) -> str:
        """The inner embedder's: the same vectors, in the same rows of the embedding store."""
        return self.local.key()

    def dimension(self) -> int:
        return self.local.dimension()

    def connect(self) -> None:
        import ray

        if not ray.is_initialized():
            try:
                ray.init(address=self.address, runtime_env=self.runtime_env, log_to_driver=False,
                         include_dashboard=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise RagexpError(f"embedder.address: cannot start or reach Ray at {self.address or 'a local instance'} "
                                  f"({err})") from None

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        import ray

        self.connect()
        rows = [{"position": i, "text": t} for i, t in enumerate(texts)]
        dataset = ray.data.from_items(rows).map_batches(
            InnerEmbedder, fn_constructor_args=(self.inner,), batch_size=self.ray_batch_size,
            concurrency=self.concurrency, num_cpus=self.num_cpus, num_gpus=self.num_gpus or None)
        vectors = np.zeros((len(texts), 0), dtype=np.float32)
        for batch in dataset.iter_batches(batch_format="numpy", batch_size=None):
            block = np.asarray(list(batch["vector"]), dtype=np.float32)
            if vectors.shape[1] == 0:
                vectors = np.zeros((len(texts), block.shape[1]), dtype=np.float32)
            vectors[np.asarray(batch["position"], dtype=np.int64)] = block
        self.rounds += 1
        log.info("embedder=ray: %d texts embedded by Ray Data (round %d)", len(texts), self.rounds)
        return vectors
