"""Field values of a log record: one value at a time (names the problem) or a column at a time
(numpy; raises when some value needs the per-value path)."""
from __future__ import annotations

import warnings
from datetime import datetime, UTC
from typing import Any

import numpy as np

POSITIVE = {"1", "+1", "true", "yes", "up", "thumbs_up", "thumbsup", "positive", "good", "like", "👍"}
NEGATIVE = {"0", "-1", "false", "no", "down", "thumbs_down", "thumbsdown", "negative", "bad", "dislike", "👎"}
MS_AFTER = 1e11  # an epoch number above this is in milliseconds (1e11 s is in the year 5138)
# the times a record may have: far wider than any log, and narrow enough that every window around one
# is a date Python can write (a time in the year 9999 or 1e17 s after the epoch is a malformed line)
EARLIEST, LATEST = datetime(1900, 1, 1, tzinfo=UTC).timestamp(), datetime(9000, 1, 1, tzinfo=UTC).timestamp()


class BadValue(ValueError):
    """A field value that cannot be read: its line is malformed."""


def epoch_seconds(value: Any) -> float:
    """An ISO 8601 time (a naive one is UTC) or seconds / milliseconds since the epoch, between
    EARLIEST and LATEST."""
    try:
        seconds = unchecked_seconds(value)
    except OverflowError:
        seconds = float("inf")
    if not EARLIEST <= seconds < LATEST:
        raise BadValue(f"timestamp {value!r} is out of range (the years 1900 to 8999)")
    return seconds


def unchecked_seconds(value: Any) -> float:
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                raise BadValue(f"timestamp {value!r} is neither ISO 8601 nor seconds since the epoch") from None
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return value / 1000.0 if value > MS_AFTER else float(value)
    raise BadValue("no timestamp" if value is None or value == "" else f"timestamp {value!r} is not a time")


def times(raw: list) -> np.ndarray:
    """A column of ISO times (YYYY-MM-DD..., ending in Z or without an offset) or of epoch
    numbers (or numeric strings), as seconds since the epoch."""
    if isinstance(raw[0], str):
        text = np.array(raw, dtype="S")  # fails on None / numbers among the strings
        if (np.strings.find(text, b"-") == 4).all():
            return iso_times(text)
    seconds = np.array(raw, dtype=np.float64)
    if np.isnan(seconds).any():
        raise BadValue("missing times")
    return in_range(np.where(seconds > MS_AFTER, seconds / 1000.0, seconds))


def in_range(seconds: np.ndarray) -> np.ndarray:
    if not ((seconds >= EARLIEST) & (seconds < LATEST)).all():
        raise BadValue("times out of range")  # the per-value path names them
    return seconds


def iso_times(text: np.ndarray) -> np.ndarray:
    if np.strings.endswith(text, b"Z").all():
        lengths = np.strings.str_len(text)
        if lengths.min() != lengths.max():
            raise BadValue("times of different lengths")  # the per-value path reads them
        text = text.astype(f"S{text.dtype.itemsize - 1}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an offset such as +02:00: the per-value path reads it right
        moments = text.astype("datetime64[us]")
    if np.isnat(moments).any():
        raise BadValue("missing times")
    return in_range(moments.astype(np.int64) / 1e6)


def number(value: Any, field: str) -> float:
    if value is None or value == "":
        return np.nan
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        raise BadValue(f"{field} {value!r} is not a number") from None
    if not result >= 0:
        raise BadValue(f"{field} {value!r} must be a number >= 0")
    return result


def numbers(raw: list, field: str) -> np.ndarray:
    column = np.array(raw, dtype=np.float64)  # None -> NaN; text that is no number raises
    if (column < 0).any():
        raise BadValue(f"negative {field}")
    return column


def satisfied(score: float, satisfied_from: float | None) -> float:
    """1.0 when a numeric feedback counts as satisfied: at least `satisfied_from` (4 on a 1-5 scale),
    or above 0 when it is None (1/0, +1/-1); else 0.0."""
    return float(score >= satisfied_from if satisfied_from is not None else score > 0)


def feedback(value: Any, satisfied_from: float | None = None) -> float:
    """A feedback value as 1.0 (satisfied), 0.0 (not) or NaN (none): a word (up/down, yes/no, ...)
    or a number on any scale (see `satisfied`)."""
    if value is None or value == "":
        return np.nan
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        if value != value:
            return np.nan
        return satisfied(float(value), satisfied_from)
    text = str(value).strip().lower()
    if satisfied_from is not None or text not in POSITIVE | NEGATIVE:
        try:
            return satisfied(float(text), satisfied_from)
        except ValueError:
            pass
    if text in POSITIVE:
        return 1.0
    if text in NEGATIVE:
        return 0.0
    raise BadValue(f"feedback {value!r} is not a number, 1/0, true/false or up/down (or empty)")


def feedbacks(raw: list, satisfied_from: float | None = None) -> np.ndarray:
    if satisfied_from is not None and any(type(v) is bool for v in raw):
        raise ValueError("true/false among numbers on a scale")  # the per-value path: true is satisfied
    column = np.array(raw, dtype=np.float64)  # numbers, booleans and None; words take the per-value path
    hit = column >= satisfied_from if satisfied_from is not None else column > 0
    return np.where(np.isnan(column), np.nan, hit.astype(np.float64))
