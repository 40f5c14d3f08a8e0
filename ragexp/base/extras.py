"""Optional extras (pyproject's [project.optional-dependencies]) a component needs: whether one is
installed, found without importing it (the config check runs before any model loads), and the one
line that names it."""
from __future__ import annotations

import importlib.util

from ragexp.errors import RagexpError

# `pip install 'ragexp[torch]'`: PyTorch and what runs on it (sentence-transformers, transformers,
# model2vec's distillation); the default install has none of it (MiniLM runs on numpy there)
TORCH = ("torch", "sentence_transformers", "transformers")


def missing(what: str, extra: str, modules: tuple[str, ...] = TORCH) -> str | None:
    """None when every module of `modules` can be imported, else the line saying that `what` needs `extra`."""
    absent = [m for m in modules if not _found(m)]
    if not absent:
        return None
    return f"{what} needs the optional extra {extra!r} ({', '.join(absent)} not installed): pip install 'ragexp[{extra}]'"


def require(what: str, extra: str, modules: tuple[str, ...] = TORCH) -> None:
    """Raises the `missing` line as a RagexpError (exit 2) when the extra is not installed."""
    problem = missing(what, extra, modules)
    if problem:
        raise RagexpError(problem)


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that fails to import, or a module set to None in sys.modules
        return False
