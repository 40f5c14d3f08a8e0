"""One validation pass before any work: every `_target_` node of a composed config is bound to
its class's `__init__` signature and each value is type-checked against the annotation (pydantic,
strict: no silent "5" -> 5), then the class's own cross-field `constraints(**arguments)` run.
Every problem is collected and reported at once, one line each, naming the full key.

Range constraints live in the signatures, through the aliases of ragexp.base.settings
(`top_k: PositiveInt`; the default is the YAML's, written there once).
Imports stay light: the component modules, pydantic and omegaconf only (no model code)."""
from __future__ import annotations

import importlib
import inspect
import logging
import re
import sys
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from ragexp.config.corpus_groups import corpus_side_problems
from ragexp.config.prompts import resolve as resolve_prompts
from ragexp.errors import RagexpError


HYDRA_KEYS = ("_target_", "_partial_", "_recursive_", "_convert_", "_args_")
REFERENCE = re.compile(r"\$\{([\w.]+)\}")  # a value that is exactly one other key, e.g. ${budget_usd}
log = logging.getLogger("ragexp")


def validate(cfg, settings: type | None = None) -> None:
    """Raises one RagexpError listing every problem of the composed config `cfg` (and of its own
    top-level keys against the class `settings`, when given: ragexp.run.settings.RunSettings); a
    setting that cannot be checked (its annotation cannot be read) is named in a warning, never
    skipped silently."""
    found = findings(cfg, settings)
    for line in found:
        if UNCHECKED in line:
            log.warning("%s", line)
    errors = [e for e in found if UNCHECKED not in e]
    if len(errors) == 1:
        raise RagexpError(errors[0])
    if errors:
        raise RagexpError(f"{len(errors)} problems in the config:\n  " + "\n  ".join(errors))


UNCHECKED = "not checked: "  # how a line about a setting that cannot be checked starts, after its key


def findings(cfg, settings: type | None = None) -> list[str]:
    """Every line the check finds, problems and settings it cannot check, in config order."""
    errors: list[str] = resolve_prompts(cfg) + corpus_side_problems(cfg)  # prompts:/... settings first: in place
    if settings is not None:
        check_component(cfg, "", errors, settings)
    walk(cfg, "", errors)
    return list(dict.fromkeys(errors))


def problems(cfg, settings: type | None = None) -> list[str]:
    """One line per problem, `full.key: what is wrong`, in config order; [] when valid."""
    return [e for e in findings(cfg, settings) if UNCHECKED not in e]


def unchecked(cfg) -> list[str]:
    """One line per setting whose type cannot be checked (an annotation that cannot be evaluated
    or that pydantic cannot validate), `full.key: not checked: why`."""
    return [e for e in findings(cfg) if UNCHECKED in e]


def walk(node, prefix: str, errors: list[str]) -> None:
    """Every component (`_target_` node) outside `hydra`, also inside plain groups of settings."""
    from omegaconf import DictConfig, OmegaConf

    for key in node:
        if (not prefix and key == "hydra") or OmegaConf.is_interpolation(node, key) or OmegaConf.is_missing(node, key):
            continue
        value = node[key]
        if isinstance(value, DictConfig):
            if "_target_" in value:
                check_component(value, f"{prefix}{key}", errors)
            else:
                walk(value, f"{prefix}{key}.", errors)


def check_component(node, key: str, errors: list[str], settings: type | None = None) -> None:
    """Checks one `_target_` node (and the components nested in it) at its full key; with
    `settings`, the keys of `node` that class names (the config's own top-level keys, key "")."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    try:
        cls = settings or locate(str(node._target_))
    except Exception as err:  # noqa: BLE001 - any import problem is the user's _target_ to fix
        errors.append(f"{key}._target_: cannot import {node._target_!r} ({type(err).__name__}: {err})")
        return
    parameters = inspect.signature(cls).parameters
    keywords = next((p for p in parameters.values() if p.kind is p.VAR_KEYWORD), None)
    named = {n: p for n, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    hints = init_annotations(cls)
    arguments: dict[str, Any] = {}  # the settings that are valid, for the class's constraints
    for name in node:
        full = f"{key}.{name}" if key else name
        if name in HYDRA_KEYS or (settings is not None and name not in named):
            continue
        if name not in named and keywords is None:
            errors.append(f"{full}: unknown setting; {cls.__name__} takes {', '.join(named) or 'no settings'}")
            continue
        if OmegaConf.is_missing(node, name):
            errors.append(f"{full}: no value given; set {full}=...")
            continue
        reference = OmegaConf.is_interpolation(node, name) and REFERENCE.fullmatch(str(node._get_node(name)._value()))
        where = reference.group(1) if reference else full  # a problem is reported where the value is written
        try:
            value = node[name]
        except Exception as err:  # noqa: BLE001 - a broken interpolation (${oc.env:...}, a missing key)
            errors.append(f"{full}: {err}".splitlines()[0])
            continue
        annotation = hints.get(name, hints.get(keywords.name) if keywords and name not in named else None)
        if isinstance(value, DictConfig) and "_target_" in value:
            wrong = wrong_class(value, annotation, where)
            if not wrong and not reference:  # a referenced component is checked at its own key
                check_component(value, full, errors)
            errors += wrong
            arguments[name] = value
            continue
        members = component_mapping(annotation)
        if members is not None and isinstance(value, DictConfig):  # named components (a hybrid's retrievers)
            for member in value:
                sub = value[member]
                if isinstance(sub, DictConfig) and "_target_" in sub:
                    errors += wrong_class(sub, members, f"{full}.{member}") or []
                    check_component(sub, f"{full}.{member}", errors)
                else:
                    errors.append(f"{full}.{member}: expected a {members.__name__} config with a _target_, got {sub!r}")
            arguments[name] = dict.fromkeys(value)
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        wrong = type_errors(annotation, value, where)
        errors += wrong
        if not wrong:
            arguments[name] = value
    for name, parameter in named.items():
        if parameter.default is parameter.empty and name not in node.keys():  # `in` is False for ??? (reported above)
            full = f"{key}.{name}" if key else name
            errors.append(f"{full}: missing; {cls.__name__} needs it (set +{full}=...)")
    errors += constraint_errors(cls, node, named, arguments, key)


def constraint_errors(cls, node, named: dict, arguments: dict, key: str) -> list[str]:
    """The class's `constraints(**settings)`, when every setting they take is valid."""
    constraints = getattr(cls, "constraints", None)
    if not callable(constraints):
        return []
    given = {**{n: p.default for n, p in named.items() if p.default is not p.empty and n not in node}, **arguments}
    try:
        inspect.signature(constraints).bind(**given)
    except TypeError:  # a setting they need is invalid (already reported) or missing
        return []
    errors = []
    for message in constraints(**given):  # "setting: ..." or about the whole node
        setting = re.match(r"([\w.\[\]]+): ", message)
        named_setting = setting and setting.group(1).split(".")[0] in {*named, *arguments}
        errors.append(f"{key}.{message}" if named_setting else f"{key}: {message}")
    return errors


class Unreadable:
    """An annotation that cannot be evaluated (e.g. a name imported only for type checkers)."""

    def __init__(self, raw: Any, why: str):
        self.raw, self.why = raw, why


def init_annotations(cls) -> dict[str, Any]:
    """The evaluated annotations of `cls.__init__`; one that cannot be evaluated is an Unreadable
    (its setting is reported as not checked)."""
    init = cls.__init__
    try:
        return typing.get_type_hints(init, include_extras=True)
    except Exception:  # noqa: BLE001 - e.g. a name imported only for type checkers
        hints: dict[str, Any] = {}
        for name, raw in getattr(init, "__annotations__", {}).items():
            try:
                hints[name] = eval(raw, init.__globals__) if isinstance(raw, str) else raw  # noqa: S307 - source code
            except Exception as err:  # noqa: BLE001
                hints[name] = Unreadable(raw, f"{type(err).__name__}: {err}")
        return hints


def is_component(candidate) -> bool:
    """A class that a `_target_` node builds: ragexp's or a user's (a class of any module outside the
    standard library), not plain data (a TypedDict, an Enum, a pydantic model)."""
    if not inspect.isclass(candidate) or hasattr(candidate, "__total__") or hasattr(candidate, "model_fields"):
        return False
    import enum

    if issubclass(candidate, enum.Enum):
        return False
    module = candidate.__module__
    return module.startswith("ragexp.") or module.split(".")[0] not in (*sys.stdlib_module_names, "builtins", "pydantic")


def component_class(annotation) -> type | None:
    """The component class an annotation names (`endpoint: Endpoint`, `scorer: MyScorer`), which
    takes a `_target_` node: ragexp's own and a user's are checked alike."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if is_component(candidate):
            return candidate
    return None


def component_mapping(annotation) -> type | None:
    """The component class of a `dict[str, Component]` annotation (named components), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is dict:
            args = typing.get_args(candidate)
            if len(args) == 2 and is_component(args[1]):  # a TypedDict is plain data, not a component
                return args[1]
    return None


def locate(path: str) -> type:
    """The class a `_target_` names (imported: its module's top-level imports only)."""
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def wrong_class(node, annotation, key: str) -> list[str]:
    expected = component_class(annotation)
    try:
        if expected is None or issubclass(locate(str(node._target_)), expected):
            return []
    except Exception:  # noqa: BLE001 - reported by check_component
        return []
    return [f"{key}._target_: {node._target_} is not a subclass of {expected.__name__}"]


@cache
def adapter(annotation):
    from pydantic import TypeAdapter

    return TypeAdapter(annotation)


def type_errors(annotation, value, key: str) -> list[str]:
    """`value` against `annotation`, one line per problem (none for an unannotated parameter)."""
    from pydantic import ValidationError

    if annotation is None or annotation is Any:
        return []
    if isinstance(annotation, Unreadable):
        return [f"{key}: {UNCHECKED}its annotation {annotation.raw!r} cannot be evaluated ({annotation.why})"]
    if (component := component_class(annotation)) is not None:
        return [] if value is None and type(None) in typing.get_args(annotation) else \
            [f"{key}: expected a {component.__name__} config with a _target_, got {value!r}"]
    try:
        checker = adapter(annotation)
    except Exception as err:  # noqa: BLE001 - a type pydantic cannot validate
        return [f"{key}: {UNCHECKED}pydantic cannot validate its annotation {annotation!r} ({type(err).__name__})"]
    try:
        checker.validate_python(value, strict=True)
    except ValidationError as err:
        seen, lines = set(), []
        for error in err.errors():
            where = key + "".join(f".{part}" for part in error["loc"] if isinstance(part, str) and part != "[key]")
            if where not in seen:  # one line per key (a union reports each of its members)
                seen.add(where)
                lines.append(f"{where}: {explain(error)}")
        return lines
    return []


def explain(error: Mapping[str, Any]) -> str:
    """pydantic's error as a short sentence about the value that was given."""
    kind, ctx, given = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in ("int_type", "int_parsing", "int_from_float"):
        whole = isinstance(given, float) and not given.is_integer()
        return f"{given!r} is not {'a whole number' if whole else 'an integer'}"
    if kind in ("float_type", "float_parsing"):
        return f"{given!r} is not a number"
    if kind in ("bool_type", "bool_parsing"):
        return f"{given!r} is not true or false"
    if kind == "string_type":
        return f"{given!r} is not a string"
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if kind in bounds:
        op, name = bounds[kind]
        return f"must be {op} {ctx[name]:g}, got {given!r}"
    if kind == "literal_error":
        return f"{given!r} is not one of {ctx['expected'].replace(' or ', ', ')}"
    if kind in ("dict_type", "mapping_type"):
        return f"{given!r} is not a mapping (write {{key: value}})"
    if kind in ("list_type", "tuple_type", "sequence_str") or kind.endswith("sequence_type"):
        return f"{given!r} is not a list (write [a, b])"
    if kind == "too_short":
        return f"{given!r} has too few items (at least {ctx['min_length']})"
    if kind == "too_long":
        return f"{given!r} has too many items (at most {ctx['max_length']})"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "missing":
        return "missing"
    if kind == "extra_forbidden":
        return "unknown setting"
    return error["msg"]
