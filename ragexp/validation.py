"""The config check and the annotated types of settings, where users import them from
(`from ragexp.validation import PositiveInt, problems`): see ragexp.config.validation and
ragexp.base.settings."""
from ragexp.base.settings import (Cosine, Fraction, NonEmptyStr, NonNegativeFloat, NonNegativeInt, OnError, Percentile,
                                  PositiveFloat, PositiveInt, Temperature)
from ragexp.config.validation import findings, problems, unchecked, validate

__all__ = ["Cosine", "Fraction", "NonEmptyStr", "NonNegativeFloat", "NonNegativeInt", "OnError", "Percentile",
           "PositiveFloat", "PositiveInt", "Temperature", "findings", "problems", "unchecked", "validate"]
