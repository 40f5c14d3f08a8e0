"""`judge=cascade`: a cheap judge scores every question, an expensive one a sample of them, drawn
where the cheap judge is unsure; each metric's mean is the cheap judge's corrected by the
expensive judge's verdicts on the sample (prediction-powered inference with known inclusion
probabilities: ragexp.stats.ppi). The pipeline judges a cascade as a whole run
(ragexp.judges.cascading), since the sample is drawn from all the cheap judgements at once."""
from __future__ import annotations

import math
from typing import Sequence

from ragexp.base.settings import Fraction, NonNegativeInt, PositiveFloat
from ragexp.errors import RagexpError
from ragexp.judges.contract import Judge
from ragexp.types import Answer, Hit, Judgement, Question


class CascadeJudge(Judge):
    """`cheap` judges every question; `expensive` the sample: `sample` below 1 is a share of the
    questions, from 1 on a count (the expected number of expensive judgements). Each question's
    chance of being drawn grows with the cheap judge's uncertainty (how close its verdict's score
    is to the verdict's threshold, `verdict_settings`; the same for every question when it has no
    verdict), is never below `floor` times the chance all would have alike (sample / questions:
    a drawn question's weight is at most 1 / floor times the uniform one's), and the draw is one seeded uniform number per question
    (`seed`), the same for every configuration of a sweep, so that configurations get their
    expensive judgements on the same questions wherever their probabilities allow. `tune`: PPI++'s
    power tuning of how far the cheap judge is trusted (false: the plain correction).

    Metrics of both judges (same name, same scale) are corrected; `pairs` pairs more, an expensive
    judge's metric with the cheap judge's metric that predicts it (a rubric's `grounded` with the
    offline `faithfulness`; on two scales, a line fitted between them: `tune` must be on). Other
    metrics of the expensive judge are estimated from its sample alone (inverse-probability
    weighted); other metrics of the cheap judge stay the cheap judge's."""

    kind = "cascade"
    scored_by = "cheap"  # a logged run's scores of every question are its cheap judge's (`<metric>_cheap`)

    def __init__(self, cheap: Judge, expensive: Judge, sample: PositiveFloat = 0.1, floor: Fraction = 0.5,
                 seed: NonNegativeInt = 0, tune: bool = True, pairs: dict[str, str] | None = None,
                 name: str | None = None):
        self.cheap, self.expensive = cheap, expensive
        for key, part in (("judge.cheap", cheap), ("judge.expensive", expensive)):
            if hasattr(part, "endpoint"):
                part.config_key = key  # type: ignore[attr-defined]  # an LLM judge: its errors name judge.expensive.endpoint
        self.sample, self.floor, self.seed, self.tune = float(sample), float(floor), seed, tune
        if hasattr(expensive, "adopt"):  # people's labels: on the cheap judge's metrics and scales
            expensive.adopt(cheap)
        if cheap.name == expensive.name and type(cheap) is type(expensive):
            raise RagexpError(f"judge.expensive: it is the same judge as judge.cheap ({cheap.name!r}); a cascade "
                              "corrects a cheap judge by a better one: choose another judge.expensive")
        self.predictors = predictors(cheap, expensive, dict(pairs or {}), tune)
        self.corrected = tuple(self.predictors)  # the expensive judge's metrics, each predicted by a cheap one
        self.expensive_only = tuple(m for m in expensive.metrics if m not in self.predictors)
        self.cheap_only = tuple(m for m in cheap.metrics if m not in self.predictors)
        self.metrics = (*cheap.metrics, *(m for m in expensive.metrics if m not in cheap.metrics))
        self.scales = {**expensive.scales, **cheap.scales}
        self.needs_reference = tuple(dict.fromkeys((*cheap.needs_reference, *expensive.needs_reference)))
        self.scorecard: dict[str, str] = {}  # its per-question values are terms of an estimate, not scores
        self.weights = dict(getattr(expensive, "weights", {}) or getattr(cheap, "weights", {}) or {})
        self.flags_hallucination = cheap.flags_hallucination or expensive.flags_hallucination
        self.name = name or f"cascade-{cheap.name}-{expensive.name}"

    def pairing(self, metric: str) -> str:
        """How `metric`'s estimate was made, for the notes: `faithfulness` or `grounded from faithfulness`."""
        source = self.predictors.get(metric, metric)
        return metric if source == metric else f"{metric} (from the cheap {source})"

    def budget(self, questions: int) -> float:
        """The expected number of expensive judgements among `questions` judged by the cheap judge."""
        wanted = self.sample * questions if self.sample < 1 else self.sample
        if self.sample >= 1 and (self.sample != int(self.sample) or self.sample > questions):
            raise RagexpError(f"judge.sample: {self.sample:g} is not a share below 1 nor a count of at most the "
                              f"{questions} questions the cheap judge judged")
        if wanted < 1:
            raise RagexpError(f"judge.sample: {self.sample:g} of {questions} questions is less than one expensive "
                              "judgement; raise it")
        return wanted

    def least_chance(self, questions: int) -> float:
        """The floor of every question's chance of being drawn, of `questions`."""
        return self.floor * min(1.0, self.budget(questions) / questions)

    def uncertainty(self, judgement: Judgement) -> float:
        """How unsure the cheap judge is of a question, 0-1: 1 - the distance of its verdict's score
        from the verdict's threshold (scaled to the farther side); 1 (all alike) without a verdict."""
        for score, setting in getattr(self.cheap, "verdict_settings", {}).values():
            threshold = getattr(self.cheap, setting, None)
            if score in judgement.scores and isinstance(threshold, (int, float)):
                low, high = self.cheap.scales.get(score, (0.0, 1.0))
                s, t = (judgement.scores[score] - low) / (high - low), (threshold - low) / (high - low)
                span = max(t, 1 - t) or 1.0
                return max(0.0, 1 - abs(s - t) / span)
        return 1.0

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise RagexpError("judge=cascade judges a whole run at once (its sample is drawn from every cheap judgement): "
                          "run it through python -m ragexp or ragexp.evaluate")

    def expected(self, questions: int) -> int:
        """The expensive judgements to expect of `questions` (for a dry run's estimate)."""
        return min(questions, math.ceil(self.budget(questions)))


def predictors(cheap: Judge, expensive: Judge, pairs: dict[str, str], tune: bool) -> dict[str, str]:
    """Each expensive metric the cascade corrects -> the cheap metric that predicts it: those of one name
    (on one scale), and the `pairs` given (judge.pairs={expensive metric: cheap metric})."""
    for metric, source in pairs.items():
        if metric not in expensive.metrics:
            raise RagexpError(f"judge.pairs.{metric}: judge {expensive.name!r} gives no {metric!r} "
                              f"(it gives {', '.join(expensive.metrics)})")
        if source not in cheap.metrics:
            raise RagexpError(f"judge.pairs.{metric}: judge {cheap.name!r} gives no {source!r} "
                              f"(it gives {', '.join(cheap.metrics)})")
        scales = tuple(expensive.scales.get(metric, ())), tuple(cheap.scales.get(source, ()))
        if scales[0] != scales[1] and not tune:
            raise RagexpError(f"judge.pairs.{metric}: {metric} is on {scales[0]} and {source} on {scales[1]}: the line "
                              "between two scales is fitted with judge.tune=true")
    same = {m: m for m in cheap.metrics if m in expensive.metrics and m not in pairs}
    if not same and not pairs:
        raise RagexpError(f"judge.expensive: judge {expensive.name!r} ({', '.join(expensive.metrics)}) has no metric "
                          f"in common with judge.cheap {cheap.name!r} ({', '.join(cheap.metrics)}): nothing to correct; "
                          "pair them: judge.pairs={EXPENSIVE_METRIC: CHEAP_METRIC}")
    apart = [m for m in same if tuple(cheap.scales.get(m, ())) != tuple(expensive.scales.get(m, ()))]
    if apart:
        m = apart[0]
        raise RagexpError(f"judge.expensive: {m} is on {expensive.scales.get(m)} for {expensive.name!r} and on "
                          f"{cheap.scales.get(m)} for {cheap.name!r}: a cascade corrects a metric on one scale")
    return {**same, **pairs}
