"""The malformed-line rule of every reader of JSON lines (recorded outputs and datasets, the monitor's
logs, OpenTelemetry exports): `json_record(line, number, max_field_bytes)` is a line's object, or
`MalformedLine` saying what is wrong with it. The reader then applies its `on_error`: `stop` refuses
in one line naming file:line and the reason, `skip` counts the line and goes on. Nothing a line
holds crashes a reader or reaches the code after it (a cache key, a judge's prompt)."""
from __future__ import annotations

import codecs
import json
import re
from typing import Any

import msgspec

MAX_FIELD_BYTES = 10_000_000  # the cap of a reader that has no setting for it (as the HTTP doors' max_reply_bytes)
MAX_DEPTH = 100  # levels of [ and {: records are a few deep; far deeper ones only break the code that reads them
LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")  # an escape of half a UTF-16 pair (\ud800-\udfff)


class MalformedLine(ValueError):
    """A line that is not one usable JSON object; `str(err)` says why (without file and line)."""


def json_record(line: bytes, number: int, max_field_bytes: int = MAX_FIELD_BYTES, setting: str | None = None) -> dict:
    """The JSON object on line `number` (1-based) of a file, read from its bytes: a byte-order mark
    on line 1 is dropped. `MalformedLine` when the line is not UTF-8, not JSON, not an object, nested
    more than MAX_DEPTH deep, holds a lone surrogate escape (`"\\ud800"`: text that is not Unicode),
    or has a field over `max_field_bytes` (a top-level field's text, strings nested in it included,
    in UTF-8 bytes; `setting` names the setting that raises the cap). Cheap for ordinary lines: the
    walk over the values is made only when the raw bytes say it could find something."""
    if number == 1 and line.startswith(codecs.BOM_UTF8):
        line = line[len(codecs.BOM_UTF8):]
    try:
        row = msgspec.json.decode(line)  # no text copy of the line; checks the UTF-8 of every string
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        row = python_parsed(line)  # says precisely what is wrong, and takes what only Python's parser takes (NaN)
    if not isinstance(row, dict):
        raise MalformedLine(f"expected a JSON object, got {type(row).__name__}")
    deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH
    if deep or len(line) > max_field_bytes or LONE_SURROGATE.search(line):
        check_values(row, max_field_bytes, setting)
    return row


def python_parsed(line: bytes) -> Any:
    """The line parsed by Python's json (NaN and Infinity taken), or MalformedLine saying why not."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        column = len(line[:err.start].decode("utf-8")) + 1  # the text before it is UTF-8
        raise MalformedLine(f"byte 0x{line[err.start]:02x} at column {column} is not UTF-8 "
                            "(save the file as UTF-8)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise MalformedLine(f"not valid JSON ({err.msg}, column {err.colno})") from None
    except RecursionError:  # a value nested thousands deep: Python's parser gives up
        raise MalformedLine(f"nested too deep to read (more than {MAX_DEPTH} levels of [ or {{)") from None


def check_values(row: dict, max_field_bytes: int, setting: str | None) -> None:
    """MalformedLine for a value nested more than MAX_DEPTH deep, a string that is not Unicode (a lone
    surrogate) or a top-level field whose strings hold more than `max_field_bytes` bytes (walked
    without recursion, so any depth is safe to look at)."""
    for field, value in row.items():
        utf8_size(field)
        size = 0
        stack: list[tuple[Any, int]] = [(value, 1)]
        while stack:
            item, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise MalformedLine(f"{field}: nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, str):
                size += utf8_size(item)
            elif isinstance(item, dict):
                stack.extend((k, depth + 1) for k in item)
                stack.extend((v, depth + 1) for v in item.values())
            elif isinstance(item, list):
                stack.extend((v, depth + 1) for v in item)
        if size > max_field_bytes:
            raise MalformedLine(f"{field}: {size:,} bytes, over the cap of {max_field_bytes:,}"
                                + (f" ({setting})" if setting else ""))


def utf8_size(text: str) -> int:
    """The UTF-8 size of `text`; MalformedLine when it holds a lone surrogate (not Unicode)."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise MalformedLine(f"a lone surrogate escape \\u{ord(text[err.start]):04x} (half of a UTF-16 pair, "
                            "which is not text): write the character itself or its whole pair") from None
