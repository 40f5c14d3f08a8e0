"""A rubric's criteria: what each one reads, its scale, and how a deterministic one is checked.

A criterion of `type: llm` (the default) is asked of the judge's endpoint; `contains`, `regex`,
`json_schema` and `python` run here, offline and free. `problems(name, settings)` says what is
wrong with one criterion's settings (ragexp.config.validation reports it before any work);
`Criterion.of(name, settings)` builds it."""
from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

from typing_extensions import TypedDict  # pydantic checks the settings against it (typing's, before 3.12, it cannot)

from ragexp.judges.rubric.scales import Scale, parse_scale
from ragexp.llm.replies import Unreadable
from ragexp.types import Answer, Hit, Question

Kind = Literal["llm", "contains", "regex", "json_schema", "python"]
DETERMINISTIC = ("contains", "regex", "json_schema", "python")
FIELDS = ("question", "contexts", "answer", "reference")  # any other name is a column of the question's row
NAME = re.compile(r"[a-z][a-z0-9_]*")


class CriterionSettings(TypedDict, total=False):
    """One criterion as written under a rubric's `criteria`, keyed by its name (the metric's)."""

    instructions: str            # what it checks, in plain words (an LLM criterion's question to the judge)
    type: Kind                   # llm (default) | contains | regex | json_schema | python
    scale: Any                   # binary | 1-5 | 1-10 | [level, ...] | {level: value, ...}; default binary
    reads: list[str]             # question, contexts, answer, reference, or a column of the row
    examples: list[dict]         # few-shot: the fields it reads and the `verdict` (with an optional `reasoning`)
    weight: float                # its share of overall_score (judge=rubric)
    target: Any                  # good >= N (a number), or {good: N, warning: M}, on its scale
    values: list[str]            # contains: the texts looked for
    match: Literal["any", "all"]  # contains: any (default) or all of them
    case_sensitive: bool         # contains, regex: default false
    pass_if: Literal["found", "absent"]  # contains, regex: pass when found (default) or when absent
    pattern: str                 # regex: searched for in the text it reads
    schema: dict                 # json_schema: the JSON schema the text must parse and validate against
    function: str                # python: module:function -> bool | number | (score, reason)


@dataclass(frozen=True)
class Criterion:
    name: str
    kind: str
    instructions: str
    scale: Scale
    reads: tuple[str, ...]
    examples: tuple[dict, ...] = ()
    weight: float | None = None
    target: tuple[float, float] | None = None  # (good, warning) on its scale
    pass_if: str = "found"  # contains, regex: pass when found, or when absent
    check: Callable[..., Any] | None = field(default=None, compare=False)  # a deterministic criterion's

    @property
    def deterministic(self) -> bool:
        return self.kind != "llm"

    @classmethod
    def of(cls, name: str, s: Mapping[str, Any]) -> Criterion:
        """The criterion its settings describe (checked first by `problems`)."""
        kind = s.get("type", "llm")
        reads = tuple(s.get("reads") or (("question", "contexts", "answer") if kind == "llm" else ("answer",)))
        return cls(name, kind, str(s["instructions"]).strip(), parse_scale(s.get("scale", "binary")), reads,
                   tuple(dict(e) for e in s.get("examples") or ()), s.get("weight"), target_of(s.get("target")),
                   s.get("pass_if", "found"), None if kind == "llm" else CHECKS[kind](s))

    def evaluate(self, question: Question, hits: Sequence[Hit], answer: Answer) -> tuple[float, str, bool]:
        """A deterministic criterion's (score, reason, clamped) for one question; Unreadable when
        the row lacks a column it reads or a python criterion returned something off its scale."""
        assert self.check is not None
        values = {name: field_value(name, question, hits, answer) for name in self.reads}
        if self.kind == "python":
            outcome = self.check(question=question.text, contexts=[h.chunk.text for h in hits], answer=answer.text,
                                 reference=question.expected, row=dict(question.attributes))
            return self.on_scale(outcome)
        found, reason = self.check(values[self.reads[0]])
        passed = found if self.pass_if == "found" else not found
        return (self.scale.high if passed else self.scale.low), reason, False

    def on_scale(self, outcome: Any) -> tuple[float, str, bool]:
        """A python criterion's return value: a bool (pass: the top of the scale, fail: the bottom),
        a number or level on its scale, or (either, reason)."""
        reason = ""
        if isinstance(outcome, tuple) and len(outcome) == 2 and isinstance(outcome[1], str):
            outcome, reason = outcome
        if isinstance(outcome, bool):
            return (self.scale.high if outcome else self.scale.low), reason, False
        score, moved = self.scale.read(outcome)
        return score, reason, moved


def field_value(name: str, question: Question, hits: Sequence[Hit], answer: Answer) -> str:
    """The text of one field a criterion reads: the contexts joined by blank lines; another name
    is a column of the question's row."""
    if name == "question":
        return question.text
    if name == "contexts":
        return "\n\n".join(h.chunk.text for h in hits)
    if name == "answer":
        return answer.text
    if name == "reference":
        return "\n".join(question.answers)
    if name not in question.attributes:
        raise Unreadable(f"its row has no column {name!r}")
    return str(question.attributes[name])


def target_of(given: Any) -> tuple[float, float] | None:
    if given is None:
        return None
    if isinstance(given, Mapping):
        return float(given["good"]), float(given["warning"])
    return float(given), float(given)


def contains(s: Mapping[str, Any]) -> Callable[[str], tuple[bool, str]]:
    wanted, every, exact = [str(v) for v in s["values"]], s.get("match", "any") == "all", bool(s.get("case_sensitive"))

    def check(text: str) -> tuple[bool, str]:
        seen = text if exact else text.lower()
        found = [v for v in wanted if (v if exact else v.lower()) in seen]
        missing = [v for v in wanted if v not in found]
        if every:
            return not missing, "contains all of them" if not missing else f"does not contain {missing[0]!r}"
        return bool(found), f"contains {found[0]!r}" if found else f"contains none of {wanted}"
    return check


def regex(s: Mapping[str, Any]) -> Callable[[str], tuple[bool, str]]:
    pattern = re.compile(s["pattern"], 0 if s.get("case_sensitive") else re.IGNORECASE)

    def check(text: str) -> tuple[bool, str]:
        found = pattern.search(text)
        return (True, f"matches at {found.group(0)[:60]!r}") if found else (False, f"no match for {pattern.pattern!r}")
    return check


def json_schema(s: Mapping[str, Any]) -> Callable[[str], tuple[bool, str]]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(dict(s["schema"]))

    def check(text: str) -> tuple[bool, str]:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            return False, f"not JSON ({err.msg} at character {err.pos})"
        error = next(iter(sorted(validator.iter_errors(value), key=lambda e: list(e.path))), None)
        if error is None:
            return True, "valid against the schema"
        where = "/".join(map(str, error.path)) or "the top level"
        return False, f"at {where}: {error.message}"
    return check


def python(s: Mapping[str, Any]) -> Callable[..., Any]:
    return imported(s["function"])


CHECKS: dict[str, Callable[[Mapping[str, Any]], Callable[..., Any]]] = {
    "contains": contains, "regex": regex, "json_schema": json_schema, "python": python}


def imported(path: str) -> Callable[..., Any]:
    """`module:function`, imported; ValueError saying why it cannot be."""
    module, _, name = str(path).partition(":")
    if not module or not name:
        raise ValueError(f"function {path!r} is not module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot import {path!r} ({type(err).__name__}: {err})") from None
    if not callable(fn):
        raise ValueError(f"{path!r} is not a function")
    return fn


NEEDS = {"contains": "values", "regex": "pattern", "json_schema": "schema", "python": "function"}


def problems(name: str, s: Mapping[str, Any], reserved: Sequence[str] = ()) -> list[str]:
    """What is wrong with one criterion, each line starting with its key under `criteria`."""
    key = f"criteria.{name}"
    found = []
    if not NAME.fullmatch(name):
        found.append(f"{key}: the name must be lower-case letters, digits and _, starting with a letter "
                     "(it becomes the metric avg_<name>)")
    if name in reserved:
        found.append(f"{key}: {name!r} is a built-in metric's name; name the criterion otherwise")
    if not str(s.get("instructions") or "").strip():
        found.append(f"{key}.instructions: missing; say in plain words what the criterion checks")
    kind = s.get("type", "llm")
    try:
        scale = parse_scale(s.get("scale", "binary"))
    except ValueError as err:
        return [*found, f"{key}.scale: {err}"]
    if kind in NEEDS and NEEDS[kind] not in s:
        found.append(f"{key}.{NEEDS[kind]}: missing; a {kind} criterion needs it")
    elif kind in ("contains", "regex", "json_schema"):
        if not scale.binary:
            found.append(f"{key}.scale: a {kind} criterion passes or fails: leave scale out or set binary")
        if len(s.get("reads") or ("answer",)) != 1:
            found.append(f"{key}.reads: a {kind} criterion reads one field, e.g. [answer]")
        try:
            CHECKS[kind](s)
        except re.error as err:
            found.append(f"{key}.pattern: does not compile ({err})")
        except Exception as err:  # noqa: BLE001 - a schema jsonschema rejects, a value of the wrong type
            found.append(f"{key}.{NEEDS[kind]}: {type(err).__name__}: {str(err).splitlines()[0]}")
    elif kind == "python":
        try:
            imported(s["function"])
        except ValueError as err:
            found.append(f"{key}.function: {err}")
    if kind == "contains" and not s.get("values"):
        found.append(f"{key}.values: give at least one text to look for")
    if "pass_if" in s and kind not in ("contains", "regex"):
        found.append(f"{key}.pass_if: only a contains or regex criterion passes when its text is found or absent")
    if kind != "llm" and s.get("examples"):
        found.append(f"{key}.examples: only an LLM criterion is shown examples")
    for n, example in enumerate(s.get("examples") or ()):
        if "verdict" not in example:
            found.append(f"{key}.examples[{n}]: no verdict; give the verdict this example deserves")
            continue
        try:
            scale.read(example["verdict"])
        except Unreadable as err:
            found.append(f"{key}.examples[{n}].verdict: {err}")
    found += target_problems(f"{key}.target", s.get("target"), scale)
    return found


def target_problems(setting: str, given: Any, scale: Scale) -> list[str]:
    """What is wrong with a target: a number (good at or above it, warning below it) or
    {good: N, warning: M}, both on the scale, warning <= good."""
    if given is None:
        return []
    try:
        good, warning = target_of(given)  # type: ignore[misc]  # not None here
    except (KeyError, TypeError, ValueError):
        return [f"{setting}: a number (good at or above it) or {{good: N, warning: M}}, got {given!r}"]
    if not (scale.low <= warning <= good <= scale.high):
        return [f"{setting}: warning {warning:g} <= good {good:g} must lie on the scale {scale.low:g}-{scale.high:g}"]
    return []
