"""Judging the sampled records of each window with the `judge` group's judge (offline, llm,
triad, ...): each record becomes the pipeline's types (a Question without an expected answer, its
retrieved contexts as Hits, read as a system's recorded contexts are, its answer as an Answer),
judged through the stage cache and, for LLM judges, the run's LLM session (request cache, retries,
concurrency, budget). A record whose contexts cannot be read is a failed record with the reason.

Production records have no expected answer, so the judge's metrics that compare with one are left
out (its `needs_reference`); the others (faithfulness, context and answer relevance, hallucination, ...)
are averaged per window as `avg_<metric>`, the same keys an offline evaluation run logs."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from ragexp.components.systems import ContextError, hits_from_contexts
from ragexp.judges.judging import judged_results
from ragexp.types import Answer, Judgement, Question, QuestionResult


def read(item: tuple[str, str, list, str]) -> QuestionResult | str:
    """A record as the pipeline's answered question, or why it cannot be judged."""
    where, query, contexts, answer_text = item
    if not query.strip() or not answer_text.strip():
        return f"no {'query' if not query.strip() else 'answer'} in the record"
    try:
        hits = tuple(hits_from_contexts(contexts))
    except ContextError as err:
        return f"contexts: {err}"
    return QuestionResult(Question(where, query, ()), hits, Answer(answer_text))


@dataclass(frozen=True)
class Sampled:
    """One judged (or failed) record of a window's sample."""

    where: str  # file:line
    query: str
    answer: str
    judgement: Judgement | None = None
    failure: str = ""


class SampleJudge:
    """`judge_all(items)` judges (where, query, contexts, answer) records as a run's answered
    questions are judged (`ragexp.judges.judging`: the stage cache under the judge's settings,
    `concurrency(judge)` at a time)."""

    def __init__(self, judge, work, settings: dict):
        self.judge, self.work, self.settings = judge, work, settings
        self.metrics = tuple(m for m in judge.metrics if m not in judge.needs_reference)

    def judge_all(self, items: list[tuple[str, str, list, str]]) -> list[Sampled]:
        records = [read(item) for item in items]
        readable = [r for r in records if isinstance(r, QuestionResult)]
        judged = iter(judged_results(self.judge, readable, self.work, self.settings, "judging sample")[0])
        out = []
        for (where, query, _, answer_text), record in zip(items, records):
            if isinstance(record, str):
                out.append(Sampled(where, query, answer_text, failure=record))
                continue
            result = next(judged)
            out.append(Sampled(where, query, answer_text, result.judgement, result.failure))
        return out

    def window_scores(self, judged: Sequence[Sampled]) -> dict[str, float]:
        """`avg_<metric>` over a window's judged records, `hallucination_rate`, and the counts."""
        ok = [s.judgement for s in judged if s.judgement is not None]
        scores: dict[str, float] = {"judged_records": len(ok), "judge_failures": len(judged) - len(ok)}
        if ok:
            for metric in self.metrics:
                values = [j.scores[metric] for j in ok if metric in j.scores]
                if values:
                    scores[f"avg_{metric}"] = round(statistics.fmean(values), 4)
            flagged = [float(j.hallucination) for j in ok if j.hallucination is not None]  # None: a rubric's
            if flagged:
                scores["hallucination_rate"] = round(statistics.fmean(flagged), 4)
        return scores
