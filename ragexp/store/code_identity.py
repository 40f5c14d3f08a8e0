"""The code's identity in the stage cache's keys: ragexp's version, the code of every component a
config names (`_target_`) with the modules it uses (ragexp's, the component's own package's, and
any other module that is not part of the Python installation: a user's helper modules), the
stage's own code, and what a component's `cache_token()` says of the state outside its code (a
service's version, a file's content). Editing the code that computes an entry, or a change
`cache_token()` reports, changes the entry's key. Code is read as its syntax tree without
docstrings and import statements, and modules are not known by name (`code_digest`): moving a
module to another package, rewording its docs or its comments keeps the keys. A package whose
`__init__` gathers its modules (`from .base import ...`: a stage's package) is read as one module,
their code in the order it imports them (`unit_of`), so splitting a module into such a package
in order keeps the keys too."""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import threading
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Callable, Generic, TypeVar

from ragexp import __version__
from ragexp.base.moved import known_as
from ragexp.store.code_closure import PARSING, gathered, locate, module_closure, module_source, unit_of


def key_of(*parts: Any) -> str:
    """A stable hash of JSON-able parts (configs, texts, other keys), of ragexp's version, of
    the code of every class a config in `parts` names (`_target_`, see `code_hash`) and of the
    `cache_token` of each such component that declares one (see `cache_tokens`)."""
    targets = sorted(set(find_targets(parts)))
    identity: dict[str, Any] = {"ragexp": __version__, "code": {known_as(t): code_hash(t) for t in targets}}
    tokens = [[known_as(target), token] for target, token in cache_tokens(parts)]
    if tokens:  # only when a component declares one: the keys of every other component stay as they were
        identity["tokens"] = tokens
    text = json.dumps([old_names(parts), identity], sort_keys=True, ensure_ascii=False, default=str)
    # a lone surrogate ("\ud800" in a JSON file) is kept as its code point's bytes: valid text is encoded as before
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def old_names(value: Any) -> Any:
    """`value` with every `_target_` named as before its module moved (`known_as`)."""
    if isinstance(value, dict):
        return {k: known_as(v) if k == "_target_" and isinstance(v, str) else old_names(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [old_names(v) for v in value]
    return value


def find_nodes(value: Any):
    """Every config node (a dict) with a `_target_` string, in nested dicts and lists."""
    if isinstance(value, dict):
        if isinstance(value.get("_target_"), str):
            yield value
        for item in value.values():
            yield from find_nodes(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from find_nodes(item)


def cache_tokens(parts: Any) -> list[list[str]]:
    """[target, token] for each component in `parts` whose class declares `cache_token` (a
    classmethod or staticmethod, called with the component's settings as keyword arguments:
    nested components as their configs) for state its code does not show: a service behind a URL
    (its version, its model), a file behind an unchanged path (its content hash). Asked at each key
    (not remembered), so a change of that state is a miss."""
    from ragexp.errors import RagexpError

    tokens = []
    for node in find_nodes(parts):
        declared = getattr(locate(node["_target_"]), "cache_token", None)
        if not callable(declared):
            continue
        settings = {k: v for k, v in node.items() if k != "_target_"}
        try:
            token = declared(**settings)
            if token is not None:  # None: nothing outside the code to say (the keys stay as they were)
                tokens.append([node["_target_"], str(token)])
        except Exception as err:  # noqa: BLE001 - the user's code: one line that names it
            raise RagexpError(f"{node['_target_']}.cache_token() failed ({type(err).__name__}: {err}); "
                              "the stage cache cannot tell whether its entries still hold") from None
    return tokens


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


R = TypeVar("R")


@dataclass
class Flight:
    """The calls with one argument now computing it or waiting for it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    callers: int = 0


class SingleFlight(Generic[R]):
    """`functools.cache` for a function of one argument whose first calls, made by several threads
    at once, compute it once: the others wait for its result (judge threads keying their questions
    together each computed the judge's code identity: 1.2 CPU-s on the judging clock for 0.12). A
    call that raises leaves nothing kept: the next one computes again. (It lives here, not in
    ragexp.base: a module a component uses is part of that component's keys.)"""

    def __init__(self, function: Callable[[str], R]):
        self.function = function
        self.results: dict[str, R] = {}
        self.flights: dict[str, Flight] = {}
        self.changed = threading.Condition()  # notified as a call starts or ends
        functools.update_wrapper(self, function)

    def __call__(self, argument: str) -> R:
        try:
            return self.results[argument]
        except KeyError:
            pass
        with self.changed:
            flight = self.flights.setdefault(argument, Flight())
            flight.callers += 1
            self.changed.notify_all()
        try:
            with flight.lock:
                if argument not in self.results:
                    self.results[argument] = self.function(argument)
                return self.results[argument]
        finally:
            with self.changed:
                flight.callers -= 1
                self.changed.notify_all()

    def in_flight(self, argument: str) -> int:
        """How many calls with `argument` are computing it or waiting for it now."""
        with self.changed:
            flight = self.flights.get(argument)
            return flight.callers if flight else 0

    def cache_clear(self) -> None:
        """Forget every result (the next call reads the code again, as a new process would)."""
        with self.changed:
            self.results.clear()


@SingleFlight
def code_hash(target: str) -> str:
    """The hash of the source files of the module that defines `target` (a dotted class or
    function name) and of every module it uses, directly or through others, that is ragexp's, of
    the target's own package, or the user's (outside the Python installation, however imported:
    `module_closure`): editing any code a component runs changes its entries' keys. Computed once
    per target per process, also when threads ask for it at once (`SingleFlight`)."""
    obj = locate(target)
    roots = {getattr(obj, "__module__", None) or target}
    roots.update(c.__module__ for c in getattr(obj, "__mro__", ()) if c.__module__ != "builtins")
    units = {unit_of(name) for name in module_closure(roots, own_package=target.split(".")[0])}
    digests = sorted(unit_digest(unit) for unit in units)
    return hashlib.sha256("\0".join(digests).encode()).hexdigest()[:16]


def identify_ahead(*parts: Any) -> threading.Thread:
    """Reads the code of every component `parts` name (`code_hash`) on a thread of its own while a
    run's first stages work, so the judge's threads find it read (or wait for the reading under
    way) instead of reading it on the judging clock (0.2 CPU-s for the triad and its endpoint). A
    failure is left for the stage that keys with it to meet."""

    def read() -> None:
        for target in sorted(set(find_targets(parts))):
            try:
                code_hash(target)
            except Exception:  # noqa: BLE001 - the stage computes it again and reports it
                pass

    thread = threading.Thread(target=read, name="ragexp-code-identity", daemon=True)
    thread.start()
    return thread


def unit_digest(unit: str) -> str:
    """`code_digest` of a module; of a package that gathers modules, of its `__init__`'s code and
    then theirs, in order, as one module: what they were before the split."""
    parts = gathered(unit)
    if not parts:
        return code_digest(module_source(unit))
    body: list[ast.stmt] = []
    for name in (unit, *parts):
        try:
            with PARSING:
                tree = Unimported().visit(ast.parse(module_source(name)))
        except (SyntaxError, ValueError):
            return code_digest(b"".join(module_source(n) for n in (unit, *parts)))
        body.extend(tree.body)
    return hashlib.sha256(ast.dump(ast.Module(body=body, type_ignores=[])).encode()).hexdigest()


def stage_code_hash(compute: Callable) -> str:
    """The stage's own code: the top-level definition (class or function) that holds `compute`
    (the bound method's, the partial's; a closure's or lambda's enclosing one), wherever its module
    is; the whole module when `compute` is not inside one."""
    function = getattr(compute, "func", compute)  # a functools.partial
    function = getattr(function, "__func__", function)  # a bound method
    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    return definition_hash(module, qualname.split(".")[0]) if isinstance(module, str) else ""


@cache
def definition_hash(module: str, name: str) -> str:
    source = module_source(module)
    try:
        with PARSING:
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return code_digest(source)[:16]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            with PARSING:
                text = ast.unparse(node)
            return code_digest(text)[:16]
    return code_digest(source)[:16]



class Unimported(ast.NodeTransformer):
    """A syntax tree without its import statements and docstrings: what moving code or rewording
    its docs changes, and what it runs does not depend on."""

    def visit_Import(self, node):
        return None

    visit_ImportFrom = visit_Import

    def generic_visit(self, node):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:]
        return super().generic_visit(node)


def code_digest(source: str | bytes) -> str:
    """The digest of code as it runs: its syntax tree without import statements and docstrings
    (comments are not in it); the text's own digest when it does not parse."""
    try:
        with PARSING:
            tree = Unimported().visit(ast.parse(source))
    except (SyntaxError, ValueError):
        text = source if isinstance(source, bytes) else source.encode()
        return hashlib.sha256(text).hexdigest()
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()
