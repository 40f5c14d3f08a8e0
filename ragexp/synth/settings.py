"""`synth:` of conf/synth.yaml, whose defaults are written there (once): the types and ranges the
config check holds them to before any chunk is made."""
from __future__ import annotations

from typing import Any, Mapping

from ragexp.base.settings import NonEmptyStr, NonNegativeFloat, PositiveInt
from ragexp.synth.quality import QualityRules


class SynthSettings:
    """`size` questions in the shares of `mix`, from a `generator` (synth/generator=...), `seed`ed;
    `max_attempts` sources per question, `max_per_document`, multi-hop `neighbours`; the dataset is
    written to `out` and the run logged to the MLflow `experiment`, and with `mlflow_dataset` also
    to that MLflow evaluation dataset of the tracker's store; `quality`: the rules a question must
    pass (ragexp.synth.quality.QualityRules)."""

    def __init__(self, size: PositiveInt, seed: int, mix: Mapping[str, NonNegativeFloat], max_attempts: PositiveInt,
                 max_per_document: PositiveInt | None, neighbours: PositiveInt, out: NonEmptyStr,
                 experiment: NonEmptyStr, quality: QualityRules, generator: Any, mlflow_dataset: NonEmptyStr | None):
        self.size, self.seed = size, seed

    @classmethod
    def constraints(cls, mix: Mapping[str, float], **_) -> list[str]:
        from ragexp.synth.build import TYPES

        unknown = sorted(set(mix) - set(TYPES))
        if unknown:
            return [f"mix: unknown question type {', '.join(unknown)}; the types are {', '.join(TYPES)}"]
        return [] if any(mix.values()) else [f"mix: the shares are all 0; give one type a share ({', '.join(TYPES)})"]
