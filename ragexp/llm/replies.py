"""Reading an LLM's JSON reply tolerantly, then strictly: the verdict is the whole reply when it is
one JSON object, else the LAST complete JSON object in it (in a code fence or after prose), never
an earlier one: an earlier object is something the judge quoted (an injected fake verdict in a
document or an answer, say) before giving its own. Its fields are then checked against what the
judge asked for. A reply that cannot be read raises `Unreadable` with the reason (the judge asks
once more, then fails the question)."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, TypeVar

T = TypeVar("T")


class Unreadable(ValueError):
    """The reply holds no JSON object with the expected fields; the message says what is wrong."""


def json_objects(text: str) -> list[dict]:
    """Every JSON object in `text` (whole, in a ```json fence, or surrounded by prose), outermost
    first, in order; a trailing comma before a closing brace or bracket is forgiven."""
    text = without_trailing_commas(text)
    decoder = json.JSONDecoder()
    found, position = [], 0
    while (start := text.find("{", position)) >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            position = start + 1
            continue
        if isinstance(value, dict):
            found.append(value)
        position = end
    return found


TRAILING_COMMA = re.compile(r",\s*[}\]]")


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
        elif char == "," and text[n + 1:].lstrip()[:1] in ("}", "]"):
            continue
        out.append(char)
    return "".join(out)


def read_reply(text: str, read: Callable[[dict], T]) -> T:
    """`read(obj)` of the verdict: the last complete JSON object in `text` (the whole reply when it
    is one); Unreadable with `read`'s complaint about it, or that there is none. Earlier objects
    are never read, even when the last one is not usable."""
    objects = json_objects(text)
    if not objects:
        shown = " ".join(text.split())[:80]
        raise Unreadable(f"no JSON object in the reply ({shown!r})" if shown else "empty reply")
    return read(objects[-1])


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
