"""A rubric criterion's scale: what its score may be, how a verdict is read onto it, and how it is
told to the judge. `binary` (fail 0, pass 1), `1-5`, `1-10`, or named levels in order (scoring
1..n, or the values given: `{poor: 0, fair: 0.5, good: 1}`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ragexp.llm.replies import Unreadable

NUMERIC = {"1-5": (1.0, 5.0), "1-10": (1.0, 10.0)}
PASS_WORDS = {"pass": True, "passed": True, "yes": True, "true": True, "fail": False, "failed": False,
              "no": False, "false": False}


@dataclass(frozen=True)
class Scale:
    """`low`..`high`; `levels` (name -> value, in order) for a binary or a named scale."""

    name: str
    low: float
    high: float
    levels: tuple[tuple[str, float], ...] = ()

    @property
    def bounds(self) -> tuple[float, float]:
        return self.low, self.high

    @property
    def binary(self) -> bool:
        return self.name == "binary"

    def describe(self) -> str:
        """How the judge is told to answer, e.g. `an integer from 1 to 5` or `one of "poor", "good"`."""
        if self.binary:
            return '"pass" or "fail"'
        if self.levels:
            return "one of " + ", ".join(f'"{name}"' for name, _ in self.levels) + " (in increasing order)"
        return f"an integer from {self.low:g} to {self.high:g}"

    def shown(self, score: float) -> str:
        """A score as the judge writes it (a level's name, pass/fail, or the number)."""
        named = {value: name for name, value in self.levels}
        return named.get(score, f"{score:g}")

    def read(self, value: Any) -> tuple[float, bool]:
        """A verdict on this scale and whether it had to be clamped into it: numbers also as
        strings ("4"), levels by name in any case or by their value, pass/fail as words, booleans or
        0/1. Unreadable when it is none of these."""
        given = value
        if self.levels:
            if isinstance(value, str):
                word = value.strip().lower()
                for name, score in self.levels:
                    if word == name.lower():
                        return score, False
                if self.binary and word in PASS_WORDS:
                    return float(PASS_WORDS[word]), False
                try:
                    value = float(word)  # a level's value as a string ("1")
                except ValueError:
                    raise Unreadable(f"{given!r} is not {self.describe()}") from None
            if self.binary and (isinstance(value, bool) or value in (0, 1)):
                return float(value), False
            if not isinstance(value, bool) and isinstance(value, (int, float)):
                for _, score in self.levels:
                    if value == score:
                        return score, False
            raise Unreadable(f"{given!r} is not {self.describe()}")
        number = value
        if isinstance(number, str):
            try:
                number = float(number.strip())
            except ValueError:
                raise Unreadable(f"{given!r} is not {self.describe()}") from None
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise Unreadable(f"{given!r} is not {self.describe()}")
        inside = min(self.high, max(self.low, float(number)))
        return inside, inside != number


def parse_scale(given: Any) -> Scale:
    """The scale a criterion's `scale` setting names; ValueError with what is accepted."""
    if given == "binary":
        return Scale("binary", 0.0, 1.0, (("fail", 0.0), ("pass", 1.0)))
    if isinstance(given, str) and given in NUMERIC:
        return Scale(given, *NUMERIC[given])
    if isinstance(given, (list, tuple)) and len(given) >= 2 and all(isinstance(n, str) and n.strip() for n in given):
        names = [n.strip() for n in given]
        if len({n.lower() for n in names}) < len(names):
            raise ValueError(f"levels {names} repeat a name")
        return Scale("levels", 1.0, float(len(names)), tuple((n, float(i)) for i, n in enumerate(names, start=1)))
    if isinstance(given, dict) and len(given) >= 2:
        levels = []
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"level {name!r} has the value {value!r}, not a number")
            levels.append((str(name).strip(), float(value)))
        values = [v for _, v in levels]
        if values != sorted(values) or len(set(values)) < len(values):
            raise ValueError(f"the levels' values {values} must increase, in the order the levels are written")
        if len({n.lower() for n, _ in levels}) < len(levels):
            raise ValueError(f"levels {[n for n, _ in levels]} repeat a name")
        return Scale("levels", values[0], values[-1], tuple(levels))
    raise ValueError(f"unknown scale {given!r}; use binary, 1-5, 1-10, a list of two or more level names in "
                     "increasing order, or a mapping of level names to increasing values")
