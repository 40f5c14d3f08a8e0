"""The fields of a log record: `monitor.columns` maps ragexp's names to the log's, and a
batch of raw values becomes `Fields`, numpy columns converted a batch at a time, and a value at
a time only in a batch where that fails, to name each malformed line."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import msgspec
import numpy as np

from ragexp.errors import RagexpError
from ragexp.monitor import values

ON_ERROR = ("stop", "skip")


class Malformed:
    """The `on_error` policy: `stop` raises a RagexpError naming file:line at the first malformed
    line; `skip` counts every one and keeps the first `keep` for the report."""

    def __init__(self, on_error: str = "stop", keep: int = 20):
        if on_error not in ON_ERROR:
            raise RagexpError(f"monitor.on_error: {on_error!r} is not one of {', '.join(ON_ERROR)}")
        self.on_error, self.keep = on_error, keep
        self.count = 0
        self.examples: list[str] = []

    def report(self, where: str, reason: str) -> None:
        message = f"{where}: {reason}"
        if self.on_error == "stop":
            raise RagexpError(f"{message} (monitor.on_error=skip counts and skips malformed lines)")
        self.count += 1
        if len(self.examples) < self.keep:
            self.examples.append(message)


# ragexp's name of each field -> the default column name; only `timestamp` is required
COLUMNS = {"timestamp": "timestamp", "query": "query", "contexts": "contexts", "answer": "answer",
           "latency_ms": "latency_ms", "tokens_in": "tokens_in", "tokens_out": "tokens_out", "model": "model",
           "error": "error", "feedback": "feedback", "variant": "variant"}
SUMMARISED = ("timestamp", "latency_ms", "tokens_in", "tokens_out", "model", "error", "feedback", "variant")


@dataclass
class Fields:
    """One batch of well-formed records, column by column."""

    lines: np.ndarray  # line numbers in the file
    time: np.ndarray  # seconds since the epoch (UTC), float64
    latency_ms: np.ndarray  # float64, NaN: not logged
    tokens_in: np.ndarray  # int64
    tokens_out: np.ndarray
    model: list | None  # model per record, None: no model column
    failed: np.ndarray  # bool: the request ended in an error
    error: list  # error kind per record (None when it succeeded)
    feedback: np.ndarray  # int8: 1 satisfied, 0 not, -1 no feedback
    rows: Sequence  # the raw rows: a JSONL line's bytes, a CSV row's list
    variant: list | None = None  # the A/B variant per record as text (None: none), None: no variant column


def conversions(satisfied_from: float | None = None) -> tuple[tuple[str, Callable, Callable], ...]:
    """(field, conversion of a column, conversion of one value), numeric feedback counting as
    satisfied from `satisfied_from` on (None: above 0)."""
    return (
        ("timestamp", values.times, values.epoch_seconds),
        ("latency_ms", lambda v: values.numbers(v, "latency_ms"), lambda v: values.number(v, "latency_ms")),
        ("tokens_in", lambda v: values.numbers(v, "tokens_in"), lambda v: values.number(v, "tokens_in")),
        ("tokens_out", lambda v: values.numbers(v, "tokens_out"), lambda v: values.number(v, "tokens_out")),
        ("feedback", lambda v: values.feedbacks(v, satisfied_from), lambda v: values.feedback(v, satisfied_from)),
    )


def text_column(raw: list | None) -> list | None:
    """A column of names (a model, a variant) as text; a name given as a number becomes its text."""
    if raw is not None and not all(type(v) is str or v is None for v in raw):
        return [None if v is None or v == "" else str(v) for v in raw]
    return raw


class Columns:
    """`monitor.columns`: ragexp's field -> the log's column name (null: the log has no such column).
    `feedback_satisfied_from` (`monitor.feedback_satisfied_from`): numeric feedback at or above it
    counts as satisfied (4 on a 1-5 scale, 7 on 0-10); None: above 0 (1/0, +1/-1)."""

    def __init__(self, mapping: dict | None = None, feedback_satisfied_from: float | None = None):
        unknown = set(mapping or {}) - set(COLUMNS)
        if unknown:
            raise RagexpError(f"monitor.columns: unknown field(s) {', '.join(sorted(unknown))}; "
                              f"the fields are {', '.join(COLUMNS)}")
        self.names = {**COLUMNS, **(mapping or {})}
        if not self.names["timestamp"]:
            raise RagexpError("monitor.columns.timestamp: every record needs a time; name its column")
        given = feedback_satisfied_from
        if given is not None and (isinstance(given, bool) or not isinstance(given, (int, float)) or given != given):
            raise RagexpError(f"monitor.feedback_satisfied_from: {given!r} is not a number (the lowest feedback "
                              "that counts as satisfied, e.g. 4 on a 1-5 scale; null: above 0)")
        self.conversions = conversions(None if given is None else float(given))

    def fields(self, lines: list[int], rows: Sequence, get: Callable[[str], list | None], where: str,
               malformed: Malformed, problems: dict[int, str]) -> Fields | None:
        """A batch's columns; `get(field)` lists a field's raw values (None: no such column).
        `problems` (line -> reason) are the batch's lines the reader could not parse: all are
        reported in line order, so `on_error=stop` stops at the first."""
        converted: dict[str, np.ndarray] = {}
        bad: dict[int, str] = {}
        for field, vectorised, one in self.conversions:
            raw = get(field)
            if raw is None:
                converted[field] = np.full(len(rows), np.nan)
                continue
            try:
                converted[field] = vectorised(raw)
            except (ValueError, TypeError, OverflowError, Warning):  # BadValue is a ValueError
                column = []
                for value, line in zip(raw, lines):
                    try:
                        column.append(one(value))
                    except values.BadValue as err:
                        bad.setdefault(line, str(err))
                        column.append(np.nan)
                converted[field] = np.array(column, dtype=np.float64)
        errors = get("error") or [None] * len(rows)
        models, variants = text_column(get("model")), text_column(get("variant"))
        for line, reason in sorted({**problems, **bad}.items()):
            malformed.report(f"{where}:{line}", reason)
        if bad:
            keep = np.array([line not in bad for line in lines])
            if not keep.any():
                return None
            rows = [r for r, k in zip(rows, keep) if k]
            errors = [e for e, k in zip(errors, keep) if k]
            models = [m for m, k in zip(models, keep) if k] if models is not None else None
            variants = [v for v, k in zip(variants, keep) if k] if variants is not None else None
            lines = [n for n, k in zip(lines, keep) if k]
            converted = {f: c[keep] for f, c in converted.items()}
        failed = np.fromiter(map(bool, errors), bool, len(errors))
        feedback = converted["feedback"]
        return Fields(np.asarray(lines), converted["timestamp"], converted["latency_ms"],
                      np.nan_to_num(converted["tokens_in"]).astype(np.int64),
                      np.nan_to_num(converted["tokens_out"]).astype(np.int64), models, failed,
                      [str(e) if f else None for e, f in zip(errors, failed)] if failed.any() else errors,
                      np.where(np.isnan(feedback), -1, feedback).astype(np.int8), rows,
                      None if variants is None or not any(variants) else variants)

    def content(self, row: Any, header: list[str] | None = None) -> tuple[str, list, str]:
        """The query, the retrieved contexts and the answer of a row (read only for sampled ones)."""
        def get(field):
            name = self.names[field]
            if not name:
                return None
            if header is None:
                return row.get(name)
            return row[header.index(name)] if name in header else None

        if isinstance(row, bytes):
            row = msgspec.json.decode(row)
        contexts = get("contexts")
        if isinstance(contexts, str) and header is not None and contexts.strip().startswith("["):
            try:
                contexts = json.loads(contexts)
            except json.JSONDecodeError:
                pass  # text that happens to start with a bracket: one context
        if contexts is None or contexts == "":
            contexts = []
        elif not isinstance(contexts, list):
            contexts = [contexts]
        return str(get("query") or ""), contexts, str(get("answer") or "")
