"""Modules that moved, under their old names: a config logged by an older run names its classes by
the path they had (`_target_: ragexp.components.exact_dense.ExactDenseRetriever`), and that path
still imports (`install()`, done by `import ragexp`). The stage cache's keys know a moved class by
its old name too (`known_as`), so a cache filled before the move is hit after it."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {  # old module -> where it is now
    "ragexp.components.exact_dense": "ragexp.components.retrievers.exact_dense",
    "ragexp.components.qdrant": "ragexp.components.retrievers.qdrant",
    "ragexp.components.qdrant_collection": "ragexp.components.retrievers.qdrant_collection",
    "ragexp.components.embedding_backends": "ragexp.components.embedders.backends",
    "ragexp.components.static_embedder": "ragexp.components.embedders.static",
    "ragexp.components.ray_embedder": "ragexp.components.embedders.ray_cluster",
    "ragexp.components.http_system": "ragexp.components.systems.http",
    "ragexp.components.system_workers": "ragexp.components.systems.workers",
    "ragexp.components.user_functions": "ragexp.components.systems.user_functions",
}
OLD_NAME = {new: old for old, new in MOVED.items()}


def known_as(target: str) -> str:
    """The name a dotted path (a `_target_`) had before its module moved; itself if it did not move."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        if module in OLD_NAME:
            return ".".join([OLD_NAME[module], *parts[end:]])
    return target


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a moved module under its old name: the module itself, not a copy."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system sets the alias's spec on it: put back in exec_module
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(finder, OldNames) for finder in sys.meta_path):
        sys.meta_path.append(OldNames())
