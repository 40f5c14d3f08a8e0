"""The functions a team hands ragexp as its system (`system=python`): named `module:function` and
imported, or handed over in Python (`ragexp.evaluate(rows, system=fn)`), called with the question
(and the params when they take them), awaited when they are async."""
from __future__ import annotations

import asyncio
import importlib
import inspect
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ragexp.errors import RagexpError

FUNCTION = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")

# functions handed over in Python (`ragexp.evaluate(rows, system=fn)`), by the name system.function logs:
# a lambda, a closure or a notebook cell's function has no importable name
GIVEN: dict[str, Callable] = {}


def given_function(function: Callable) -> str:
    """Registers a callable handed over in Python and returns the name `system.function` gives it
    (`module:name`, the name made of its qualified name's words: `<lambda>` is `lambda`)."""
    module = re.sub(r"[^\w.]", "_", str(getattr(function, "__module__", None) or "given")).strip(".") or "given"
    words = re.findall(r"\w+", str(getattr(function, "__qualname__", None) or type(function).__name__))
    name = f"{module}:{'_'.join(w for w in words if w != 'locals') or 'function'}"
    if not FUNCTION.fullmatch(name):
        name = f"given:function_{len(GIVEN)}"
    GIVEN[name] = function
    return name


def called(value: Any) -> Any:
    """A function's return value, awaited when it is awaitable (an async function): on a fresh event
    loop, in a thread of its own when this thread already runs one (a notebook's)."""
    if not inspect.isawaitable(value):
        return value

    async def waited():
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(waited())
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, waited()).result()


def takes_params(function: Callable) -> bool:
    """Whether `function` takes `(question, params)`; one that takes only the question (as an
    MLflow `predict_fn` may) is called with it alone."""
    try:
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    except (TypeError, ValueError):
        return True
    return len(parameters) != 1 or parameters[0].kind == parameters[0].VAR_POSITIONAL


def import_function(path: str, setting: str) -> Callable:
    """The function `module:function` names (or one handed over in Python: `given_function`), or a
    RagexpError naming `setting`."""
    if path in GIVEN:
        return GIVEN[path]
    if not FUNCTION.fullmatch(str(path)):
        raise RagexpError(f"{setting}: {path!r} is not module:function (such as mypackage.rag:answer)")
    module, name = path.split(":")
    try:
        function = getattr(importlib.import_module(module), name)
    except Exception as err:  # noqa: BLE001 - any import problem is the user's setting to fix
        raise RagexpError(f"{setting}: cannot import {path!r} ({type(err).__name__}: {err})") from None
    if not callable(function):
        raise RagexpError(f"{setting}: {path!r} is {type(function).__name__}, not a function")
    return function
