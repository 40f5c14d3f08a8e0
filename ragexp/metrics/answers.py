"""Answer metrics against the expected answers (`metrics.answer`), chosen by name as the retrieval
measures are (ragexp.metrics.retrieval): `answer_measure("token_f1")` is the measure, whose
`value(prediction, answers)` scores one question's answer; `ANSWER_MEASURES` names them all."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ragexp.errors import RagexpError
from ragexp.metrics.generation import exact_match, token_f1


@dataclass(frozen=True)
class AnswerMeasure:
    """One answer metric; `value(prediction, answers)` scores a generated answer against the
    expected ones. `embedder`: the scoring embedder, for the measures that embed."""

    name: str
    embedder: Any = None

    def available(self) -> bool:
        """Whether it can score (a measure that embeds needs an embedder)."""
        return True

    def value(self, prediction: str, answers: Sequence[str]) -> float:
        raise NotImplementedError


class Correctness(AnswerMeasure):
    """The cosine of the generated and the best-matching expected answer by the scoring embedder
    (0-1, a negative cosine counts 0; an empty answer 0); none without an embedder."""

    def available(self) -> bool:
        return self.embedder is not None

    def value(self, prediction: str, answers: Sequence[str]) -> float:
        vectors = self.embedder.embed([prediction or " ", *answers])
        cosine = float(max(vectors[1:] @ vectors[0])) if prediction.strip() else 0.0
        return round(max(0.0, cosine), 4)


class ExactMatch(AnswerMeasure):
    """SQuAD's exact match (ragexp.metrics.generation.exact_match)."""

    def value(self, prediction: str, answers: Sequence[str]) -> float:
        return exact_match(prediction, answers)


class TokenF1(AnswerMeasure):
    """SQuAD's token F1 (ragexp.metrics.generation.token_f1)."""

    def value(self, prediction: str, answers: Sequence[str]) -> float:
        return round(token_f1(prediction, answers), 4)


ANSWER_MEASURES: dict[str, type[AnswerMeasure]] = {
    "correctness": Correctness,
    "exact_match": ExactMatch,
    "token_f1": TokenF1,
}


def answer_measure(name: str, embedder: Any = None, setting: str = "metrics.answer") -> AnswerMeasure:
    """`answer_measure("token_f1")` -> the token F1 measure; an unknown name is refused naming `setting`."""
    if name not in ANSWER_MEASURES:
        raise RagexpError(f"{setting}: {name!r} is not an answer metric; use {', '.join(ANSWER_MEASURES)}")
    return ANSWER_MEASURES[name](name, embedder)
