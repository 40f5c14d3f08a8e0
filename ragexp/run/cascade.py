"""Judging a run with `judge=cascade` (ragexp.judges.cascade): the cheap judge on every answered
question, then the sample drawn from its judgements, then the expensive judge on the sample, each
judgement through the stage cache under its own judge's settings (a rerun, or a larger sample,
pays only for new ones). Each question's judgement then holds, per metric, its term of the
corrected mean (their mean over the questions is the run's `avg_<metric>`: ragexp.stats.ppi),
the cheap score (`<metric>_cheap`) and, when drawn, the expensive one (`<metric>_expensive`);
`judged_by` says who judged it and `inclusion_probability` its chance of being drawn."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np

from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.judges.cascade import CascadeJudge
from ragexp.stats.ppi import coordinated_uniform, inclusion_probabilities, ppi_terms, t_value
from ragexp.types import Judgement, QuestionResult

HALLUCINATION = "hallucination"


def cascade_judged(judge: CascadeJudge, settings: dict, work, results: list[QuestionResult], judge_answer
                   ) -> tuple[list[QuestionResult], list[str]]:
    """The results judged by the cascade, and the notes that say what was corrected with what."""
    answered = [r for r in results if r.answer is not None]
    budget = judge.budget(len(answered)) if answered else 0.0  # a bad sample stops the run before any judging
    cheap = map_concurrently(partial(judge_answer, work, judge.cheap, settings["cheap"]), results,
                             concurrency(judge.cheap), "judging (cheap)")
    judged = [i for i, r in enumerate(cheap) if r.judgement is not None]
    if not judged:
        return cheap, []
    uncertainty = [judge.uncertainty(cheap[i].judgement) for i in judged]  # type: ignore[arg-type]  # judged
    pi = inclusion_probabilities(uncertainty, min(budget, len(judged)), judge.least_chance(len(judged)))
    drawn = [i for i, p in zip(judged, pi) if coordinated_uniform(cheap[i].question.qid, judge.seed) < p]
    expensive = map_concurrently(partial(judge_answer, work, judge.expensive, settings["expensive"]),
                                 [replace(cheap[i], judgement=None) for i in drawn], concurrency(judge.expensive),
                                 "judging (expensive)")
    labels = {i: r.judgement for i, r in zip(drawn, expensive) if r.judgement is not None and not r.failure}
    failed = [r.failure for r in expensive if r.judgement is None or r.failure]
    chance = dict(zip(judged, pi))
    scored = corrected_scores(judge, [cheap[i].judgement for i in judged],  # type: ignore[misc]  # judged
                              [labels.get(i) for i in judged], np.asarray(pi), judge.tune)
    out = list(cheap)
    for n, i in enumerate(judged):
        out[i] = replace(cheap[i], judgement=joined(judge, cheap[i].judgement, labels.get(i), scored[n], chance[i]))  # type: ignore[arg-type]
    spread = {m: float(np.nanstd(values(list(labels.values()), m), ddof=1)) if len(labels) > 1 else float("nan")
              for m in judge.corrected}
    return out, notes(judge, scored, len(judged), len(drawn), len(labels), failed, budget, spread)


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
        f = values(cheap, metric) if metric not in judge.expensive_only else np.zeros(len(cheap))
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
           probability: float) -> Judgement:
    scores = {m: v for m, v in terms.items() if m != HALLUCINATION}
    scores.update({f"{m}_cheap": v for m, v in cheap.scores.items()})
    if expensive is not None:
        scores.update({f"{m}_expensive": v for m, v in expensive.scores.items()})
    for side, j in (("cheap", cheap), ("expensive", expensive)):
        if j is not None and j.hallucination is not None:
            scores[f"hallucination_{side}"] = float(j.hallucination)
    details = {"judged_by": "cheap+expensive" if expensive is not None else "cheap",
               "inclusion_probability": round(probability, 6),
               **{f"cheap_{k}": v for k, v in cheap.details.items()},
               **({f"expensive_{k}": v for k, v in expensive.details.items()} if expensive is not None else {})}
    reasoning = cheap.reasoning + (f" | {expensive.judge}: {expensive.reasoning}" if expensive is not None else "")
    return Judgement(judge.name, scores, terms.get(HALLUCINATION, cheap.hallucination), reasoning, details)


def notes(judge: CascadeJudge, terms: list[dict[str, float]], judged: int, drawn: int, labelled: int,
          failed: list[str], budget: float, spread: dict[str, float], level: float = 0.95) -> list[str]:
    """What the run's corrected means rest on: the sample, its failures, each corrected metric's
    CI and effective sample size (how many expensive judgements of uniformly drawn questions would
    give as narrow an interval alone: their spread squared over the estimate's variance)."""
    lines = [f"judge=cascade: {judge.cheap.name} judged {judged} questions, {judge.expensive.name} {labelled} of them "
             f"(drawn {drawn}, {budget:g} expected; where {judge.cheap.name} is least sure, each with a known chance); "
             f"avg_<metric> of {', '.join(judge.corrected)} is the cheap mean corrected by them, "
             f"<metric>_cheap and <metric>_expensive beside it (the latter over the drawn questions, unweighted)"]
    if judge.expensive_only:
        lines.append(f"judge=cascade: {', '.join(judge.expensive_only)}: from the expensive judgements alone "
                     "(inverse-probability weighted), the cheap judge gives none")
    if labelled < 2:
        lines.append(f"judge=cascade: {labelled} expensive judgement(s): too few to correct with; avg_<metric> is the "
                     f"cheap judge's, uncorrected (raise judge.sample)")
    if failed:
        lines.append(f"judge=cascade: {len(failed)} of {drawn} expensive judgements failed and are left out of the "
                     f"correction (first: {failed[0]}); the estimate assumes they are no different from the others")
    for metric in judge.corrected:
        column = np.array([t[metric] for t in terms if metric in t])
        if len(column) > 1 and labelled > 1:
            error = column.std(ddof=1) / np.sqrt(len(column))
            half = float(t_value(level, labelled - 1)) * error
            known = error > 0 and spread[metric] > 0  # NaN (one label) and 0 (all alike) say nothing
            effective = f", effective sample size {spread[metric] ** 2 / error ** 2:.0f}" if known else ""
            lines.append(f"judge=cascade: avg_{metric} {column.mean():.3f} [{column.mean() - half:.3f}, "
                         f"{column.mean() + half:.3f}] ({level:.0%} CI over {len(column)} questions, {labelled} "
                         f"expensive{effective})")
    return lines
