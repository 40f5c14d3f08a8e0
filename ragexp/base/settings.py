"""The annotated types of settings: a component states the range of a setting in its signature
(`top_k: PositiveInt`; its default is written in the option's YAML), and the config check (ragexp.config.validation) enforces it before any
work, naming the key."""
from __future__ import annotations

from typing import Annotated, Literal

from annotated_types import Ge, Gt, Interval, MinLen

PositiveInt = Annotated[int, Ge(1)]
NonNegativeInt = Annotated[int, Ge(0)]
PositiveFloat = Annotated[float, Gt(0)]
NonNegativeFloat = Annotated[float, Ge(0)]
Fraction = Annotated[float, Interval(ge=0, le=1)]
Cosine = Annotated[float, Interval(ge=-1, le=1)]
Temperature = Annotated[float, Interval(ge=0, le=2)]
Percentile = Annotated[float, Interval(gt=0, lt=100)]
NonEmptyStr = Annotated[str, MinLen(1)]
OnError = Literal["stop", "skip"]
