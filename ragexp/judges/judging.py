"""Judging a run's answered questions: the one cached path from an answer to its judgement, used by
every door that judges (the pipeline, `ragexp.evaluate` and the pytest plugin through it, the
monitor, `python -m ragexp.calibrate --outputs`).

`judged_results(judge, results, run)` asks the judge for all of them at once (`Judge.judge_all`);
a judge that does not override it has each question judged by `Judging.each`: through the stage
cache under the judge's settings (`judgement_key`), in its traced span, without the metrics that
need a reference when the question has none. What the stage cache may keep is said once
(`storable`): a whole judgement, on its judge's scales, with no failed criterion; a failed request
raises (`QuestionFailed`) and is never stored. A judge's expected failures fail the question with
the reason; anything else is a bug and ends the run."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ContextManager, Sequence

from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.errors import QuestionFailed
from ragexp.judges.contract import NO_CONTEXTS, Judge, context, context_free, reference_free
from ragexp.store.cache import key_of
from ragexp.store.tracing import ended
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult


@dataclass
class Judging:
    """A run as a judge judges it (the `Run` of the judge contract): `store`, the run's stage cache
    and spans (`Work`); `settings`, the judge's resolved settings its judgements are keyed under;
    `label`, the progress line's words; `notes`, what the judges said of how the run was judged (a
    cascade's sample), shared by every part."""

    store: Any
    settings: dict
    label: str = "judging"
    questions: frozenset[str] = frozenset()
    notes: list[str] = field(default_factory=list)

    def each(self, judge: Judge, items: Sequence[QuestionResult]) -> list[Judgement | QuestionFailed]:
        return map_concurrently(partial(self.one, judge), items, concurrency(judge), self.label)

    def one(self, judge: Judge, result: QuestionResult) -> Judgement | QuestionFailed:
        """One answered question judged in its traced span, or the QuestionFailed that says why not."""
        question, answer = result.question, result.answer
        assert answer is not None  # judged_results hands over answered questions only
        inputs = {"question": question.text, "answer": answer.text, "expected": list(question.answers)}
        with self.store.span(question.qid, "judge", "EVALUATOR", inputs) as span:
            try:
                judgement = self.judged(judge, question, result.hits, answer, span)
            except QuestionFailed as err:  # expected (endpoint, unreadable reply, budget); others end the run
                ended(span, replace(result, failure=str(err)), None)
                return err
            ended(span, result, {"scores": judgement.scores, "reasoning": judgement.reasoning})
            return judgement

    def judged(self, judge: Judge, question: Question, hits: Sequence[Hit], answer: Answer, span=None) -> Judgement:
        """One judge's judgement of an answer, through the stage cache (only what `storable` allows is
        kept: a rerun asks again for the rest), without the metrics that need a reference when the
        question has none. The only judging through the stage cache there is."""
        key = judgement_key(self.settings, question, hits, answer)
        judgement = self.store.cached("judgement", key, judge.judge, question, hits, answer, span=span,
                                      expect=partial(on_scale, judge.scales), keep=storable)
        if question.answerable and not question.answers:  # nothing to compare the answer with
            judgement = reference_free(judgement, judge)
        if not hits:  # nothing to judge the answer's grounding on
            judgement = context_free(judgement, judge)
        return judgement

    def uncached(self, judge: Judge, items: Sequence[QuestionResult]) -> list[QuestionResult]:
        return [r for r in items if r.answer is not None
                and not self.store.holds("judgement", judgement_key(self.settings, r.question, r.hits, r.answer))]

    def part(self, key: str, label: str | None = None) -> Judging:
        return Judging(self.store, self.settings[key], label or self.label, self.questions, self.notes)

    def beside(self, settings: dict, label: str | None = None) -> Judging:
        return Judging(self.store, settings, label or self.label, self.questions, self.notes)

    def note(self, text: str) -> None:
        self.notes.append(text)  # printed once, with the run's notes

    def span(self, qid: str, name: str, span_type: str, inputs) -> ContextManager:
        return self.store.span(qid, name, span_type, inputs)


def judged_results(judge: Judge, results: Sequence[QuestionResult], store: Any, settings: dict,
                   label: str = "judging") -> tuple[list[QuestionResult], list[str]]:
    """The results with the judge's judgement of each answered one, or its failure with the reason
    (those that failed before judging stay as they are), and the judges' notes on how they judged.
    `store`: the run's stage cache and spans (`Work`); `settings`: the judge's resolved settings,
    which its judgements are keyed under."""
    run = Judging(store, settings, label, frozenset(r.question.qid for r in results))
    answered = [i for i, r in enumerate(results) if r.answer is not None]
    without = [results[i].question.qid for i in answered if not results[i].hits]
    if without and judge.needs_contexts:
        left_out = ", ".join((*judge.needs_contexts, *(["the hallucination verdict"] if judge.flags_hallucination else [])))
        share = "every question" if len(without) == len(answered) else \
            f"{len(without)} of {len(answered)} answered questions (first: {', '.join(without[:3])})"
        run.note(f"{NO_CONTEXTS} for {share}: {left_out} not judged for them, never scored; their means, "
                 "overall_score and the gate use the questions that had contexts, or leave them out")
    verdicts = judge.judge_all([results[i] for i in answered], run)
    out = list(results)
    for i, verdict in zip(answered, verdicts, strict=True):
        out[i] = replace(results[i], judgement=verdict) if isinstance(verdict, Judgement) \
            else replace(results[i], failure=str(verdict))
    return out, run.notes


def storable(judgement: Judgement) -> bool:
    """Whether the stage cache may keep a judgement: a whole one (no criterion failed)."""
    return not judgement.details.get("failed_criteria")


def on_scale(scales: dict[str, tuple[float, float]], value) -> str | None:
    """What is wrong with a stored judgement, or None: another type, or a score that is not a finite
    number on its judge's scale (a damaged entry's 1e308 would be averaged as it is)."""
    if not isinstance(value, Judgement):
        return f"a judgement entry holds a {type(value).__name__}"
    for metric, score in value.scores.items():
        low, high = scales.get(metric, (-math.inf, math.inf))
        if not math.isfinite(score) or not low <= score <= high:
            return f"{metric} {score!r} is off its scale [{low:g}, {high:g}]"
    return None


def judgement_key(judge_settings: dict, question: Question, hits: Sequence[Hit], answer: Answer) -> str:
    return key_of("judgement", judge_settings, question.text, question.answers, context(hits), answer.text)
