"""A stage cache entry as a file: plain JSON data, read through explicit codecs (`ragexp.types.CODECS`),
so that a cache file never runs code. `entry_pieces` writes an entry in pieces and `read_entry`
reads it back one member and one list element at a time, so a stage output of 10^6 chunks is never
held as one JSON tree beside the records made from it; anything else is `Unreadable`."""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

from ragexp.types import CODECS

FORMAT = "ragexp-stage-cache/2"  # the layout of an entry file; /1 was pickles, never read


class Unreadable(ValueError):
    """A cache entry that is damaged, from another format, or not ragexp's."""


def encode(value: Any) -> Any:
    """A stage output as plain JSON data: records as {"<Type>": {...fields}}, dicts as {"dict": {...}}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {str(k): encode(v) for k, v in value.items()}}
    if type(value) in CODECS:
        name, to_dict, _ = CODECS[type(value)]
        return {name: to_dict(value)}
    raise TypeError(f"cannot store a {type(value).__name__} in the stage cache")


DECODERS = {name: from_dict for name, _, from_dict in CODECS.values()}


def decode(data: Any) -> Any:
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if isinstance(data, dict) and len(data) == 1:
        [(name, payload)] = data.items()
        if name == "dict" and isinstance(payload, dict):
            return {k: decode(v) for k, v in payload.items()}
        if name in DECODERS and isinstance(payload, dict):
            try:
                return DECODERS[name](payload)
            except (KeyError, TypeError, ValueError) as err:
                raise Unreadable(f"a damaged {name} ({type(err).__name__}: {err})") from None
    raise Unreadable(f"unknown data {json.dumps(data)[:60]}")


def entry_pieces(stage: str, key: str, value: Any) -> Iterator[bytes]:
    """A cache entry's JSON, {"format", "stage", "key", "value"}, in pieces: a list value one
    element at a time, so a stage output of 10^6 chunks is never held as one encoded tree and one
    string (at 10^6 chunks that was ~4 GB on top of the chunks, a whole run's peak memory)."""
    head = {"format": FORMAT, "stage": stage, "key": key}
    if not isinstance(value, (list, tuple)):
        yield json.dumps({**head, "value": encode(value)}, ensure_ascii=False).encode()
        return
    yield json.dumps(head, ensure_ascii=False)[:-1].encode() + b', "value": ['
    for i, item in enumerate(value):
        yield (b", " if i else b"") + json.dumps(encode(item), ensure_ascii=False).encode()
    yield b"]}"


_SPACE = re.compile(r"[ \t\n\r]*")
_JSON = json.JSONDecoder()


def read_entry(text: str) -> tuple[dict, Any]:
    """An entry's head ({"format", "stage", "key"}) and its decoded value, read as entry_pieces
    writes it: the object's members one at a time and a list value one element at a time, each
    element decoded into its record at once, so that 10^6 chunks are never held as a JSON tree
    beside the records made from it. Anything but one JSON object is Unreadable."""
    head: dict[str, Any] = {}
    value: Any = None
    try:
        i, closed = _opened(text, 0, "{", "}")
        while not closed:
            name, i = _JSON.raw_decode(text, i)
            i = _expect(text, _skip(text, i), ":")
            if name == "value" and text[i] == "[":
                value, i = _read_list(text, i)
            elif name == "value":
                data, i = _JSON.raw_decode(text, i)
                value = decode(data)
            else:
                head[str(name)], i = _JSON.raw_decode(text, i)
            i, closed = _separator(text, i, "}")
    except IndexError:
        raise Unreadable("the entry ends early (truncated)") from None
    if _skip(text, i) != len(text):
        raise Unreadable(f"extra data after the entry at character {i}")
    return head, value


def _read_list(text: str, i: int) -> tuple[list, int]:
    """The decoded elements of the JSON list that starts at text[i], and the index after it."""
    items: list[Any] = []
    i, closed = _opened(text, i, "[", "]")
    while not closed:
        data, i = _JSON.raw_decode(text, i)
        items.append(decode(data))
        i, closed = _separator(text, i, "]")
    return items, i


def _opened(text: str, i: int, opening: str, closing: str) -> tuple[int, bool]:
    """After `opening` at text[i]: past an immediate `closing` (True: empty), else at the first item."""
    i = _expect(text, i, opening)
    return (i + 1, True) if text[i] == closing else (i, False)


def _separator(text: str, i: int, closing: str) -> tuple[int, bool]:
    """After an item: past `closing` (True: the end), else past its ',' at the next item."""
    i = _skip(text, i)
    if text[i] == closing:
        return i + 1, True
    i = _expect(text, i, ",")
    if text[i] == closing:
        raise Unreadable(f"a ',' before {closing!r} at character {i}")
    return i, False


def _skip(text: str, i: int) -> int:
    match = _SPACE.match(text, i)
    return match.end() if match else i


def _expect(text: str, i: int, char: str) -> int:
    i = _skip(text, i)
    if text[i] != char:
        raise Unreadable(f"expected {char!r} at character {i}")
    return _skip(text, i + 1)
