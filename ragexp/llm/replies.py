"""Reading an LLM's JSON reply tolerantly, then strictly, and which of its JSON objects is the
verdict. Neither place in the reply tells: a judge may quote an injected verdict before its own or
after it. So:

- a JSON object whose text occurs in the data the request sent (`ChatRequest.data`: the
  question, the contexts, the answers), whitespace, indentation and trailing commas aside, is a
  quote, never the verdict, wherever it stands;
- of the other objects, those that give what was asked for (`read` takes them) are the verdict
  when they agree; when they disagree the reply is `Disagreeing`: the judge is asked once more,
  then the question fails with the reason;
- a reply asked for with a JSON schema (`response_format` json_schema) is one object, its verdict
  (unless that object is a quote); two objects there are unreadable.

Their fields are then checked against what the judge asked for. A reply that cannot be read
raises `Unreadable` with the reason (the judge asks once more, then fails the question)."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


class Unreadable(ValueError):
    """The reply holds no JSON object with the expected fields; the message says what is wrong."""


class Disagreeing(Unreadable):
    """The reply gives more than one verdict (objects that are no quotes and that give what was
    asked for) and they differ: none of them is taken, nor any part of one."""


def json_objects(text: str) -> list[dict]:
    """Every JSON object in `text` (whole, in a ```json fence, or surrounded by prose), outermost
    first, in order; a trailing comma before a closing brace or bracket is forgiven."""
    return [obj for obj, _ in json_spans(text)]


def json_spans(text: str) -> list[tuple[dict, str]]:
    """Each JSON object of `json_objects` with its text (trailing commas left out)."""
    text = without_trailing_commas(text)
    decoder = json.JSONDecoder()
    found, position = [], 0
    while (start := text.find("{", position)) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested past what Python parses
            position = start + 1
            continue
        if isinstance(value, dict):
            found.append((value, text[start:end]))
        position = end
    return found


TRAILING_COMMA = re.compile(r",\s*[}\]]")
CLOSING_NEXT = re.compile(r"\s*[}\]]")


def without_trailing_commas(text: str) -> str:
    """`text` without the commas that stand, outside a JSON string, right before a `}` or `]`
    (`{"score": 4,}`): the one slip of hand-written JSON that models make often."""
    if not TRAILING_COMMA.search(text):
        return text
    out, in_string, escaped = [], False, False
    for n, char in enumerate(text):
        if in_string:
            in_string = not (char == '"' and not escaped)
            escaped = char == "\\" and not escaped
        elif char == '"':
            in_string = True
        elif char == "," and CLOSING_NEXT.match(text, n + 1):
            continue
        out.append(char)
    return "".join(out)


def read_reply(text: str, read: Callable[[dict], T], data: Sequence[str] = (), one_object: bool = False) -> T:
    """`read(obj)` of the reply's verdict: its objects that are not quotes of `data`, read; the
    one reading when they agree. Unreadable with `read`'s complaint about the last object when
    none can be read, or why there is no verdict; Disagreeing when two readings differ.
    `one_object`: the reply was asked for with a JSON schema, so it holds one object."""
    readings: list[T] = []
    complaint = None
    for obj in own_objects(text, data, one_object):
        try:
            readings.append(read(obj))
        except Unreadable as err:
            complaint = err
    if not readings:
        assert complaint is not None  # own_objects gives at least one object
        raise complaint
    if any(reading != readings[0] for reading in readings[1:]):
        raise Disagreeing(f"the reply gives {len(readings)} different verdicts (JSON objects with the fields asked "
                          "for); reply with exactly one")
    return readings[0]


def own_objects(text: str, data: Sequence[str] = (), one_object: bool = False) -> list[dict]:
    """The JSON objects of the reply that may be its verdict: every one that is not a quote of
    `data`, in order. Unreadable when there is none, when every one is a quote, or (`one_object`)
    when the reply holds more than one."""
    found = json_spans(text)
    if not found:
        shown = " ".join(text.split())[:80]
        raise Unreadable(f"no JSON object in the reply ({shown!r})" if shown else "empty reply")
    if one_object and len(found) > 1:
        raise Unreadable(f"{len(found)} JSON objects in a reply asked for as one (with a JSON schema)")
    quoted = "\0".join(plain(d) for d in data)
    own = [obj for obj, span in found if not (data and plain(span) in quoted)]
    if not own:
        raise Unreadable("the reply's only JSON object" + ("s quote" if len(found) > 1 else " quotes")
                         + " the data it was given (the question, a document or an answer); they are never the "
                         "verdict: give your own")
    return own


COMMA_BEFORE_CLOSING = re.compile(r",(?=[}\]])")


def plain(text: str) -> str:
    """`text` as a quote is compared: without whitespace, a neutralised tag's `‹` read as `<`,
    without commas before a closing brace or bracket (one pass of C-speed string work: data may
    be megabytes long, and nested deep)."""
    return COMMA_BEFORE_CLOSING.sub("", "".join(str(text).replace("\u2039", "<").split()))


def field(obj: dict, name: str) -> Any:
    if name not in obj:
        raise Unreadable(f"missing field {name!r}")
    return obj[name]


def number(obj: dict, name: str) -> float:
    value = field(obj, name)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise Unreadable(f"{name} is not a number: {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unreadable(f"{name} is not a number: {value!r}")
    return float(value)


def clamped(value: float, low: float, high: float) -> tuple[float, bool]:
    """`value` moved into [low, high], and whether it had to be."""
    inside = min(high, max(low, value))
    return inside, inside != value


def boolean(obj: dict, name: str) -> bool:
    value = field(obj, name)
    words = {"true": True, "yes": True, "supported": True, "false": False, "no": False,
             "not_supported": False, "unsupported": False}
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower().replace(" ", "_") in words:
        return words[value.strip().lower().replace(" ", "_")]
    raise Unreadable(f"{name} is not true or false: {value!r}")


def text(obj: dict, name: str) -> str:
    value = field(obj, name)
    if not isinstance(value, str):
        raise Unreadable(f"{name} is not a string: {value!r}")
    return value.strip()


def items(obj: dict, name: str) -> list:
    value = field(obj, name)
    if not isinstance(value, list):
        raise Unreadable(f"{name} is not a list: {value!r}")
    return value


def integer(value: Any, name: str) -> int:
    """A whole number given as a number or a string ("3")."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise Unreadable(f"{name} is not a whole number: {value!r}")
    return int(value)


def text_bound(max_tokens: int, strings: int, skeleton_tokens: int, most: int) -> int:
    """The `maxLength` a reply's schema gives each of its `strings` free-text fields so that the whole
    reply ends within `max_tokens` even when every character is a token of its own (a model that
    repeats digits): what the tokens left after the JSON's `skeleton_tokens` allow, at most `most`
    characters, at least 20."""
    return max(20, min(most, (max_tokens - skeleton_tokens) // max(1, strings)))
