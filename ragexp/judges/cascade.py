"""`judge=cascade`: a cheap judge scores every question, an expensive one a sample of them, drawn
where the cheap judge is unsure; each metric's mean is the cheap judge's corrected by the
expensive judge's verdicts on the sample (prediction-powered inference with known inclusion
probabilities: ragexp.stats.ppi). A cascade judges a whole run at once (`judge_all`), since the
sample is drawn from all the cheap judgements: the cheap judge on every answered question, then the
sample drawn from its judgements, then the expensive judge on the sample, each judgement through
the stage cache under its own judge's settings (a rerun, or a larger sample, pays only for new
ones). Each question's judgement then holds, per metric, its term of the corrected mean (their mean
over the questions is the run's `avg_<metric>`), the cheap score (`<metric>_cheap`) and, when
drawn, the expensive one (`<metric>_expensive`); `judged_by` says who judged it and
`inclusion_probability` its chance of being drawn."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ragexp.base.settings import Fraction, NonNegativeInt, PositiveFloat
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.judges.contract import Judge, Run
from ragexp.judges.people import NO_LABEL, WANTED, PeopleJudge
from ragexp.stats.ppi import coordinated_uniform, inclusion_probabilities, ppi_terms, t_value
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult

HALLUCINATION = "hallucination"


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

    def __init__(self, cheap: Judge, expensive: Judge, sample: PositiveFloat, floor: Fraction,
                 seed: NonNegativeInt, tune: bool, pairs: dict[str, str] | None,
                 name: str | None):
        self.cheap, self.expensive = cheap, expensive
        for key, part in (("judge.cheap", cheap), ("judge.expensive", expensive)):
            if part.endpoint is not None:
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
        self.needs_contexts = tuple(dict.fromkeys((*cheap.needs_contexts, *expensive.needs_contexts)))
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
        for verdict, (score, _) in self.cheap.verdict_settings.items():
            threshold = self.cheap.verdict_threshold(verdict)
            if score in judgement.scores and threshold is not None:
                low, high = self.cheap.scales.get(score, (0.0, 1.0))
                s, t = (judgement.scores[score] - low) / (high - low), (threshold - low) / (high - low)
                span = max(t, 1 - t) or 1.0
                return max(0.0, 1 - abs(s - t) / span)
        return 1.0

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise RagexpError("judge=cascade judges a whole run at once (its sample is drawn from every cheap judgement): "
                          "run it through python -m ragexp or ragexp.evaluate")

    def judge_all(self, items: Sequence[QuestionResult], run: Run) -> list[Judgement | QuestionFailed]:
        """The answered questions judged by the cascade (its notes, what was corrected with what, go to
        `run.note`)."""
        budget = self.budget(len(items)) if items else 0.0  # a bad sample stops the run before any judging
        cheap = self.cheap.judge_all(items, run.part("cheap", "judging (cheap)"))
        judged = [i for i, j in enumerate(cheap) if isinstance(j, Judgement)]
        if not judged:
            return cheap
        cheap_of = {i: cheap[i] for i in judged}
        uncertainty = [self.uncertainty(cheap_of[i]) for i in judged]  # type: ignore[arg-type]  # judged
        pi = inclusion_probabilities(uncertainty, min(budget, len(judged)), self.least_chance(len(judged)))
        drawn = [i for i, p in zip(judged, pi) if coordinated_uniform(items[i].question.qid, self.seed) < p]
        expensive = self.expensive.judge_all([items[i] for i in drawn], run.part("expensive", "judging (expensive)"))
        labels = {i: j for i, j in zip(drawn, expensive) if isinstance(j, Judgement)}
        failed = [str(j) for j in expensive if not isinstance(j, Judgement) and str(j) != NO_LABEL]
        chance = dict(zip(judged, pi))
        scored = corrected_scores(self, [cheap_of[i] for i in judged], [labels.get(i) for i in judged],  # type: ignore[misc]
                                  np.asarray(pi), self.tune)
        out: list[Judgement | QuestionFailed] = list(cheap)
        unlabelled = {i for i, j in zip(drawn, expensive) if not isinstance(j, Judgement) and str(j) == NO_LABEL}
        for n, i in enumerate(judged):
            out[i] = joined(self, cheap_of[i], labels.get(i), scored[n], chance[i], i in unlabelled)  # type: ignore[arg-type]
        expensive_values = {m: values(list(labels.values()), m) for m in self.corrected}
        given = {m: v[~np.isnan(v)] for m, v in expensive_values.items()}
        for note in notes(self, scored, len(judged), len(drawn), len(labels), failed, budget, given):
            run.note(note)
        return out

    def roles(self) -> dict[str, Judge]:
        return {"judge": self.expensive, "cheap_judge": self.cheap}

    def run_files(self, results: Sequence[QuestionResult]) -> dict[str, str]:
        """Its judges' files (people's labels: the drawn questions left to label)."""
        return {**self.cheap.run_files(results), **self.expensive.run_files(results)}

    def planned(self, questions: Sequence[Question]) -> dict[str, set[str]]:
        """For a dry run: the questions its expensive judge would be asked about, as many as its sample
        expects (the cheap judge does not run in a dry run, so those with the lowest shared uniform
        numbers stand in: with equal chances, the ones drawn)."""
        ranked = sorted(questions, key=lambda q: (coordinated_uniform(q.qid, self.seed), q.qid))
        return {"judge": {q.qid for q in ranked[: self.expected(len(questions))]}}

    def planned_notes(self, questions: int) -> tuple[str, ...]:
        """A dry run of a cascade with people's labels: how many labels it would ask people for."""
        if not isinstance(self.expensive, PeopleJudge):  # an expensive judge that asks: its requests are counted
            return ()
        return (f"people's labels: about {self.expected(questions)} of the {questions} questions, drawn where the "
                "cheap judge is unsure (no request; a run lists those without a label in its folder's "
                "labels_wanted.csv)",)

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


def values(judgements, metric: str) -> np.ndarray:
    """Each judgement's `metric` (NaN where it has none, or where there is no judgement)."""
    def value(j):
        if j is None:
            return np.nan
        if metric == HALLUCINATION:
            return np.nan if j.hallucination is None else float(j.hallucination)
        return float(j.scores[metric]) if metric in j.scores else np.nan
    return np.array([value(j) for j in judgements], dtype=float)


def corrected_scores(judge: CascadeJudge, cheap: list[Judgement], expensive: list[Judgement | None], pi: np.ndarray,
                     tune: bool) -> list[dict[str, float]]:
    """Per question, each metric's term of its estimate: corrected (both judges), weighted by the
    inverse probability (the expensive judge's only), the cheap score (the cheap judge's only).
    A metric is estimated over the questions the cheap judge gave it to (those with a reference,
    for a metric that needs one)."""
    terms: list[dict[str, float]] = [{} for _ in cheap]
    both = [*judge.corrected, *([HALLUCINATION] if judge.cheap.flags_hallucination and judge.expensive.flags_hallucination else [])]
    for metric in (*both, *judge.expensive_only, *judge.cheap_only):
        f = values(cheap, judge.predictors.get(metric, metric)) if metric not in judge.expensive_only \
            else np.zeros(len(cheap))
        y = values(expensive, metric)
        if metric in judge.expensive_only:  # over the questions the expensive judge could give it to
            keep = np.ones(len(cheap), dtype=bool)
        else:
            keep = ~np.isnan(f)
        if metric in judge.cheap_only:
            for n in np.flatnonzero(keep):
                terms[n][metric] = float(f[n])
            continue
        xi = keep & ~np.isnan(y)
        if not keep.any() or (xi.sum() < 2 and metric in judge.expensive_only):
            continue  # nothing to estimate it from
        if xi.sum() < 2:  # fewer than two expensive judgements: nothing to correct with (a note says so)
            for n in np.flatnonzero(keep):
                terms[n][metric] = float(f[n])
            continue
        own, _ = ppi_terms(f[keep], np.nan_to_num(y[keep]), xi[keep], pi[keep], tune and metric not in judge.expensive_only)
        for n, term in zip(np.flatnonzero(keep), own):
            terms[n][metric] = round(float(term), 6)
    return terms


def joined(judge: CascadeJudge, cheap: Judgement, expensive: Judgement | None, terms: dict[str, float],
           probability: float, wanted: bool = False) -> Judgement:
    scores = {m: v for m, v in terms.items() if m != HALLUCINATION}
    scores.update({f"{m}_cheap": v for m, v in cheap.scores.items()})
    if expensive is not None:
        scores.update({f"{m}_expensive": v for m, v in expensive.scores.items()})
    for side, j in (("cheap", cheap), ("expensive", expensive)):
        if j is not None and j.hallucination is not None:
            scores[f"hallucination_{side}"] = float(j.hallucination)
    details = {"judged_by": "cheap+expensive" if expensive is not None else WANTED if wanted else "cheap",
               "inclusion_probability": round(probability, 6),
               **{f"cheap_{k}": v for k, v in cheap.details.items()},
               **({f"expensive_{k}": v for k, v in expensive.details.items()} if expensive is not None else {})}
    reasoning = cheap.reasoning + (f" | {expensive.judge}: {expensive.reasoning}" if expensive is not None else "")
    return Judgement(judge.name, scores, terms.get(HALLUCINATION, cheap.hallucination), reasoning, details)


def notes(judge: CascadeJudge, terms: list[dict[str, float]], judged: int, drawn: int, labelled: int,
          failed: list[str], budget: float, given: dict[str, np.ndarray], level: float = 0.95) -> list[str]:
    """What the run's corrected means rest on: the sample, its failures, each corrected metric's
    CI and effective sample size (how many expensive judgements of uniformly drawn questions would
    give as narrow an interval alone: their spread squared over the estimate's variance). `given`:
    each metric's expensive values (a metric people left unlabelled has fewer than the judgements)."""
    corrected = [m for m in judge.corrected if len(given.get(m, ())) > 1]
    lines = [f"judge=cascade: {judge.cheap.name} judged {judged} questions, {judge.expensive.name} {labelled} of them "
             f"(drawn {drawn}, {budget:g} expected; where {judge.cheap.name} is least sure, each with a known chance)"
             + (f"; avg_<metric> of {', '.join(map(judge.pairing, corrected))} is the cheap mean corrected by them, <metric>_cheap and "
                "<metric>_expensive beside it (the latter over the drawn questions, unweighted)" if corrected else "")]
    if judge.expensive_only:
        lines.append(f"judge=cascade: {', '.join(judge.expensive_only)}: from the expensive judgements alone "
                     "(inverse-probability weighted), the cheap judge gives none")
    if labelled < 2:
        lines.append(f"judge=cascade: {labelled} expensive judgement(s): too few to correct with; avg_<metric> is the "
                     f"cheap judge's, uncorrected (raise judge.sample)")
    elif len(corrected) < len(judge.corrected):
        lines.append(f"judge=cascade: {', '.join(m for m in judge.corrected if m not in corrected)}: fewer than 2 "
                     "expensive values, so the cheap judge's mean, uncorrected")
    if failed:
        lines.append(f"judge=cascade: {len(failed)} of {drawn} expensive judgements failed and are left out of the "
                     f"correction (first: {failed[0]}); the estimate assumes they are no different from the others")
    for metric in corrected:
        column = np.array([t[metric] for t in terms if metric in t])
        count, spread = len(given[metric]), float(np.std(given[metric], ddof=1))
        if len(column) > 1:
            error = column.std(ddof=1) / np.sqrt(len(column))
            half = float(t_value(level, count - 1)) * error
            known = error > 0 and spread > 0  # 0 (all alike) says nothing
            effective = f", effective sample size {spread ** 2 / error ** 2:.0f}" if known else ""
            lines.append(f"judge=cascade: avg_{metric} {column.mean():.3f} [{column.mean() - half:.3f}, "
                         f"{column.mean() + half:.3f}] ({level:.0%} CI over {len(column)} questions, {count} "
                         f"expensive{effective})")
    return lines
