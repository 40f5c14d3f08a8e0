"""The code's identity in the stage cache's keys: ragexp's version, the source of every
component a config names (`_target_`) with the ragexp modules it uses, and the stage's own code.
Editing the code that computes an entry changes the entry's key."""
from __future__ import annotations

import hashlib
import importlib
import json
import sys
from functools import cache
from pathlib import Path
from typing import Any, Callable, TypeGuard

from ragexp import __version__


def key_of(*parts: Any) -> str:
    """A stable hash of JSON-able parts (configs, texts, other keys), of ragexp's version and of
    the code of every class a config in `parts` names (`_target_`, see `code_hash`)."""
    targets = sorted(set(find_targets(parts)))
    identity = {"ragexp": __version__, "code": {t: code_hash(t) for t in targets}}
    text = json.dumps([parts, identity], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def find_targets(value: Any):
    """Every `_target_` string in nested dicts and lists (a component's resolved config)."""
    if isinstance(value, dict):
        if isinstance(value.get("_target_"), str):
            yield value["_target_"]
        for item in value.values():
            yield from find_targets(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from find_targets(item)


@cache
def code_hash(target: str) -> str:
    """The hash of the source files of the module that defines `target` (a dotted class or
    function name) and of every ragexp module it uses, directly or through others: editing any
    code a component runs changes its entries' keys. Sources are read once per process."""
    obj = locate(target)
    roots = {getattr(obj, "__module__", None) or target}
    roots.update(c.__module__ for c in getattr(obj, "__mro__", ()) if c.__module__ != "builtins")
    digest = hashlib.sha256()
    for name in sorted(module_closure(roots)):
        digest.update(name.encode() + b"\0" + module_source(name) + b"\0")
    return digest.hexdigest()[:16]


def locate(target: str) -> Any:
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def ragexp_module(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and (name == "ragexp" or name.startswith("ragexp."))


def module_closure(roots: set[str]) -> set[str]:
    """`roots` and the ragexp modules their globals come from, transitively."""
    seen, todo = set(), [r for r in roots if r]
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen.add(name)
        for value in list(vars(sys.modules[name]).values()):
            used = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
            if ragexp_module(used) and used not in seen:
                todo.append(used)
    return seen


def module_source(name: str) -> bytes:
    path = getattr(sys.modules.get(name), "__file__", None)
    try:
        return Path(path).read_bytes() if path else b""
    except OSError:
        return b""


def stage_code_hash(compute: Callable) -> str:
    """The stage's own code: the source of the module that defines `compute` (the pipeline)."""
    name = getattr(compute, "__module__", None)
    return module_hash(name) if isinstance(name, str) else ""


@cache
def module_hash(name: str) -> str:
    return hashlib.sha256(module_source(name)).hexdigest()[:16]
