"""`embedder=static`: a static embedder distilled locally from a sentence-transformers model (by
default the packaged MiniLM) with model2vec's `distill`.

Distillation embeds every token of the teacher's vocabulary once with the teacher, reduces the
vectors with PCA (`pca_dims`) and weighs them by how rare the token is (SIF, `sif_coefficient`);
a text's vector is then the mean of its tokens' vectors: no transformer at run time. It runs once,
offline, from the teacher's folder (about a minute for MiniLM on 2 cores) and is kept in the cache
folder (`<cache.dir>/models/static-<hash>/`: safetensors, tokenizer.json, config.json; plain data,
no pickle); later runs load it in well under a second. With the stage cache off it is kept in a
temporary folder of the process (so each process distils again)."""
from __future__ import annotations

import logging
import os
import shutil
import threading
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import numpy as np
from annotated_types import Interval

from ragexp.components.embedders import Embedder, SentenceTransformerEmbedder
from ragexp.components.embedders.local_model import torch_modules
from ragexp.errors import RagexpError
from ragexp.base import extras
from ragexp.base.settings import PositiveInt

log = logging.getLogger(__name__)

SifCoefficient = Annotated[float, Interval(gt=0, lt=1)]
_LOCK = threading.Lock()


class StaticEmbedder(Embedder):
    """Mean of distilled token vectors (model2vec). `teacher_path: null` is the packaged MiniLM;
    `model_dir` overrides where the distilled model is kept (default: the cache folder)."""

    def __init__(self, teacher_path: str | None, pca_dims: PositiveInt | None,
                 sif_coefficient: SifCoefficient | None, name: str, batch_size: PositiveInt,
                 model_dir: str | None):
        # only its folder is read (`path()` resolves and checks it): distilled on PyTorch
        self.teacher = SentenceTransformerEmbedder(teacher_path, name="teacher", batch_size=1, device="cpu", backend="torch")
        self.pca_dims, self.sif_coefficient = pca_dims, sif_coefficient
        self.name, self.batch_size, self.model_dir = name, batch_size, model_dir

    @classmethod
    def constraints(cls, teacher_path: str | None = None, **_) -> list[str]:
        """Distillation runs the teacher on PyTorch, with model2vec and skeletoken: the `torch` extra."""
        problem = extras.missing("embedder=static", "torch", ("model2vec", "skeletoken", *torch_modules(teacher_path)))
        return [f"teacher_path: {problem}"] if problem else []

    def settings(self) -> tuple:
        return f"model2vec-{model2vec_version()}", f"pca{self.pca_dims}", f"sif{self.sif_coefficient}"

    def key(self) -> str:
        return ":".join(["static", self.teacher.path(), *self.settings()])

    def folder(self) -> Path:
        from ragexp.components.embedders.backends import model_folder

        folder = model_folder(self.cache, "static", self.teacher.path(), *self.settings())
        return Path(self.model_dir) / folder.name if self.model_dir else folder

    def dimension(self) -> int:
        return int(self.model().dim)

    def model(self):
        return load_static_model(self.teacher.path(), self.pca_dims, self.sif_coefficient, str(self.folder()))

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        return self.model().encode(texts, batch_size=self.batch_size, use_multiprocessing=False)


@lru_cache(maxsize=1)
def model2vec_version() -> str:
    """Part of the distilled model's key and folder: another model2vec may distil other vectors."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("model2vec")
    except PackageNotFoundError:
        raise RagexpError("embedder=static needs the optional extra 'torch' (model2vec not installed): "
                          "pip install 'ragexp[torch]'") from None


@lru_cache(maxsize=8)
def load_static_model(teacher: str, pca_dims: int | None, sif_coefficient: float | None, folder: str):
    """The distilled model in `folder`, distilled there first when it is missing or unreadable."""
    from model2vec import StaticModel

    with _LOCK:
        path = Path(folder)
        if path.is_dir():
            try:
                return StaticModel.from_pretrained(path, force_download=False)
            except Exception as err:  # noqa: BLE001 - damaged or foreign files: distil again
                log.warning("embedder=static: %s is unreadable (%s: %s); distilling it again", path, type(err).__name__, err)
                shutil.rmtree(path, ignore_errors=True)
        distil(teacher, pca_dims, sif_coefficient, path)
        return StaticModel.from_pretrained(path, force_download=False)


def distil(teacher: str, pca_dims: int | None, sif_coefficient: float | None, target: Path) -> None:
    """Distils `teacher` into `target` (written to a temporary folder beside it, then renamed, so
    another process never reads half a model; if one finished first, its model is kept)."""
    extras.require("embedder=static", "torch", ("model2vec", "skeletoken", *extras.TORCH))
    try:
        from model2vec.distill import distill
    except ImportError as err:
        raise RagexpError(f"embedder=static: model2vec's distillation cannot be imported ({err}); "
                          "pip install 'ragexp[torch]'") from None
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    log.warning("embedder=static: distilling %s into %s (once; about a minute for MiniLM on 2 cores)", teacher, target)
    model = distill(teacher, device="cpu", pca_dims=pca_dims, sif_coefficient=sif_coefficient)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{target.name}")
    model.save_pretrained(tmp)
    try:
        os.rename(tmp, target)
    except OSError:  # another process renamed its copy first
        shutil.rmtree(tmp, ignore_errors=True)
