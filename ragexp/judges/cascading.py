"""Judging a run with `judge=cascade` (ragexp.judges.cascade): the cheap judge on every answered
question, then the sample drawn from its judgements, then the expensive judge on the sample, each
judgement through the stage cache under its own judge's settings (a rerun, or a larger sample,
pays only for new ones). Each question's judgement then holds, per metric, its term of the
corrected mean (their mean over the questions is the run's `avg_<metric>`: ragexp.stats.ppi),
the cheap score (`<metric>_cheap`) and, when drawn, the expensive one (`<metric>_expensive`);
`judged_by` says who judged it and `inclusion_probability` its chance of being drawn."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ragexp.judges.cascade import CascadeJudge
from ragexp.judges.judging import judge_all
from ragexp.judges.people import WANTED, PeopleJudge
from ragexp.stats.ppi import coordinated_uniform, inclusion_probabilities, ppi_terms, t_value
from ragexp.types import Judgement, QuestionResult, RunResult

HALLUCINATION = "hallucination"
NO_LABEL = "no label yet"  # a drawn question people have not labelled: listed in the run folder's WANTED_SHEET
WANTED_SHEET = "labels_wanted.csv"


def cascade_judged(judge: CascadeJudge, settings: dict, work, results: list[QuestionResult]
                   ) -> tuple[list[QuestionResult], list[str]]:
    """The results judged by the cascade, and the notes that say what was corrected with what."""
    answered = [r for r in results if r.answer is not None]
    budget = judge.budget(len(answered)) if answered else 0.0  # a bad sample stops the run before any judging
    cheap = judge_all(work, judge.cheap, settings["cheap"], results, label="judging (cheap)")
    judged = [i for i, r in enumerate(cheap) if r.judgement is not None]
    if not judged:
        return cheap, []
    uncertainty = [judge.uncertainty(cheap[i].judgement) for i in judged]  # type: ignore[arg-type]  # judged
    pi = inclusion_probabilities(uncertainty, min(budget, len(judged)), judge.least_chance(len(judged)))
    drawn = [i for i, p in zip(judged, pi) if coordinated_uniform(cheap[i].question.qid, judge.seed) < p]
    unjudged = [replace(cheap[i], judgement=None) for i in drawn]
    said: list[str] = []
    if isinstance(judge.expensive, PeopleJudge):  # read, not asked: no cache, no concurrency
        expensive, said = labelled_by_people(judge.expensive, unjudged, {r.question.qid for r in cheap})
    else:
        expensive = judge_all(work, judge.expensive, settings["expensive"], unjudged, label="judging (expensive)")
    labels = {i: r.judgement for i, r in zip(drawn, expensive) if r.judgement is not None and not r.failure}
    failed = [r.failure for r in expensive if (r.judgement is None or r.failure) and r.failure != NO_LABEL]
    chance = dict(zip(judged, pi))
    scored = corrected_scores(judge, [cheap[i].judgement for i in judged],  # type: ignore[misc]  # judged
                              [labels.get(i) for i in judged], np.asarray(pi), judge.tune)
    out = list(cheap)
    unlabelled = {i for i, r in zip(drawn, expensive) if r.failure == NO_LABEL}
    for n, i in enumerate(judged):
        out[i] = replace(cheap[i], judgement=joined(judge, cheap[i].judgement, labels.get(i), scored[n], chance[i],  # type: ignore[arg-type]
                                                     i in unlabelled))
    expensive_values = {m: values(list(labels.values()), m) for m in judge.corrected}
    given = {m: v[~np.isnan(v)] for m, v in expensive_values.items()}
    return out, notes(judge, scored, len(judged), len(drawn), len(labels), failed, budget, given) + said


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


def labelled_by_people(people: PeopleJudge, drawn: list[QuestionResult], questions: set[str]
                       ) -> tuple[list[QuestionResult], list[str]]:
    """The drawn questions with the judgement people's labels give them, or the failure `NO_LABEL`;
    and the notes that say how many are labelled, what is left to label and what is not used."""
    given = people.given(questions)
    out = [replace(r, judgement=people.judgement(given[r.question.qid])) if r.question.qid in given
           else replace(r, failure=NO_LABEL) for r in drawn]
    wanted = sum(r.failure == NO_LABEL for r in out)
    unused = len(set(given) - {r.question.qid for r in drawn})
    said = [f"judge=cascade: people's labels ({people.where()}): {len(drawn) - wanted} of the {len(drawn)} drawn "
            "questions labelled"]
    if wanted:
        said.append(f"judge=cascade: {wanted} drawn questions have no label yet: they are in the run folder's "
                    f"{WANTED_SHEET}; fill it in and pass it as judge.expensive.labels (a rerun draws the same questions; "
                    "until then the estimate leaves them out, as if they were like the labelled ones)")
    if unused:
        said.append(f"judge=cascade: {unused} labelled questions were not drawn and are not used (an estimate "
                    "corrects with the drawn questions only, whose chance of being drawn is known)")
    return out, said


def write_wanted(result: RunResult, folder: Path) -> Path | None:
    """The drawn questions people have not labelled yet as a sheet to fill in, `labels_wanted.csv` in
    the run folder: what the judge saw and an empty column per metric of the cheap judge (a labels
    file as `judge.expensive.labels` reads it)."""
    import csv

    wanted = [r for r in result.questions if r.judgement is not None and r.judgement.details.get("judged_by") == WANTED]
    if not wanted:
        return None
    metrics = [key[: -len("_cheap")] for key in wanted[0].judgement.scores if key.endswith("_cheap")]  # type: ignore[union-attr]
    path = folder / WANTED_SHEET
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question_id", "annotator", "question", "context", "expected_answer", "generated_answer", *metrics])
        for r in wanted:
            context = "\n\n".join(f"[Doc {n}] {h.chunk.text}" for n, h in enumerate(r.hits, start=1))
            writer.writerow([r.question.qid, "", r.question.text, context, " | ".join(r.question.answers),
                             r.answer.text if r.answer else "", *[""] * len(metrics)])
    return path


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
