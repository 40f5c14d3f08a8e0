"""Judging one answered question: through the stage cache under the judge's settings, without
the metrics that need a reference when it has none, and with a rubric beside the judge when one
is chosen (`joined`). A judge's expected failures (`QuestionFailed`) fail the question with the
reason; anything else is a bug and ends the run."""
from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Sequence

from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.errors import QuestionFailed
from ragexp.judges.contract import Judge, reference_free
from ragexp.store.cache import key_of
from ragexp.store.tracing import ended
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult


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


def context(hits) -> list[tuple[str, str]]:
    return [(h.chunk.chunk_id, h.chunk.text) for h in hits]


def judge_answer(work, judge: Judge, judge_settings: dict, result: QuestionResult,
                 beside: tuple[Judge, dict] | None = None) -> QuestionResult:
    """An answered question judged (cached like its answer), or failed with the reason of a
    `QuestionFailed` (an endpoint error, an unreadable reply, a missing field); any other exception
    is a bug and ends the run, as in `answer_question`. A question without a reference keeps only
    the judge's metrics that need none (`reference_free`). `beside`: a rubric judged after the
    judge under its own cache key; its scores join the judgement's, and a question it cannot judge
    at all keeps the judge's judgement with the rubric's criteria failed (`failed_criteria`)."""
    if result.answer is None:  # failed before judging
        return result
    question, hits, answer = result.question, result.hits, result.answer
    inputs = {"question": question.text, "answer": answer.text, "expected": list(question.answers)}
    with work.span(question.qid, "judge", "EVALUATOR", inputs) as span:
        try:
            judgement = judged(work, judge, judge_settings, question, hits, answer, span)
            if beside is not None:
                rubric, rubric_settings = beside
                try:
                    extra = judged(work, rubric, rubric_settings, question, hits, answer, span)
                except QuestionFailed as err:  # every criterion failed: the judge's judgement stands
                    extra = Judgement(rubric.name, {}, None, "", {"failed_criteria": dict.fromkeys(rubric.metrics, str(err))})
                judgement = joined(judgement, extra)
            result = replace(result, judgement=judgement)
        except QuestionFailed as err:  # an expected failure (endpoint, unreadable reply, budget); others end the run
            result = replace(result, failure=str(err))
        j = result.judgement
        return ended(span, result, {"scores": j.scores, "reasoning": j.reasoning} if j else None)


def judge_all(work, judge: Judge, judge_settings: dict, results: Sequence[QuestionResult],
              beside: tuple[Judge, dict] | None = None, label: str = "judging") -> list[QuestionResult]:
    """Every result judged (`judge_answer`), as many at once as the judge allows, its texts embedded
    ahead (`embed_ahead`)."""
    embed_ahead(work, judge, judge_settings, results)
    return map_concurrently(partial(judge_answer, work, judge, judge_settings, beside=beside), results,
                            concurrency(judge), label)


def judged(work, judge: Judge, judge_settings: dict, question: Question, hits: Sequence[Hit], answer: Answer,
           span) -> Judgement:
    """One judge's judgement of an answer, through the stage cache (a judgement in which some
    metrics failed, `failed_criteria`, is not stored: a rerun asks again), without the metrics
    that need a reference when the question has none."""
    key = judgement_key(judge_settings, question, hits, answer)
    judgement = work.cached("judgement", key, judge.judge, question, hits, answer, span=span,
                            expect=partial(on_scale, getattr(judge, "scales", {})),
                            keep=lambda j: not j.details.get("failed_criteria"))
    if question.answerable and not question.answers:  # nothing to compare the answer with
        judgement = reference_free(judgement, judge)
    return judgement


def judgement_key(judge_settings: dict, question: Question, hits: Sequence[Hit], answer: Answer) -> str:
    return key_of("judgement", judge_settings, question.text, question.answers, context(hits), answer.text)


def embed_ahead(work, judge: Judge, judge_settings: dict, results: Sequence[QuestionResult]) -> None:
    """The texts a judge that embeds (the offline judges: `texts_to_embed`) will embed for the
    answers it has not judged yet (not in the stage cache), embedded in one call before judging:
    in batches of sentences of like length across questions, where judging question by question
    embeds a few dozen sentences at a time (1.6x slower with MiniLM on 2 cores: bench group cheap_judge). The vectors wait
    in the run's embedding cache, where the judge finds them; the judgements are the same."""
    texts_of = getattr(judge, "texts_to_embed", None)
    if texts_of is None:
        return
    texts: dict[str, None] = {}
    for result in results:
        if result.answer is None or work.holds("judgement", judgement_key(judge_settings, result.question, result.hits,
                                                                          result.answer)):
            continue
        texts.update(dict.fromkeys(texts_of(result.question, result.hits, result.answer)))
    if texts:
        judge.embedder.embed(list(texts))  # type: ignore[attr-defined]  # a judge with texts_to_embed embeds


def joined(judgement: Judgement, rubric: Judgement) -> Judgement:
    """The judge's judgement with a rubric's scores and details beside its own (in each repeat too);
    its reasoning follows the judge's."""
    reasoning = " | ".join(r for r in (judgement.reasoning, f"{rubric.judge}: {rubric.reasoning}" if rubric.reasoning else "") if r)
    details = {**judgement.details, **{k: v for k, v in rubric.details.items() if k != "clamped"}}
    if "clamped" in rubric.details:
        details["clamped"] = [*judgement.details.get("clamped", []), *rubric.details["clamped"]]
    return replace(judgement, scores={**judgement.scores, **rubric.scores}, reasoning=reasoning, details=details,
                   repeats=tuple(replace(r, scores={**r.scores, **rubric.scores}) for r in judgement.repeats))
