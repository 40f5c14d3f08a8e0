"""Judging the sampled records of each window with the `judge` group's judge (offline, llm,
triad, ...): each record becomes the pipeline's types (a Question without an expected answer,
its retrieved contexts as Hits, its answer as an Answer), judged through the stage cache and,
for LLM judges, the run's LLM session (request cache, retries, concurrency, budget).

Production records have no expected answer, so metrics that compare with one are left out
(`NEEDS_EXPECTED`); the others (faithfulness, context and answer relevance, hallucination, ...)
are averaged per window as `avg_<metric>`, the same keys an offline evaluation run logs."""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from ragexp.store.cache import key_of
from ragexp.concurrency import concurrency, map_concurrently
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.types import Answer, Chunk, Hit, Judgement, Question

NEEDS_EXPECTED = ("answer_similarity",)  # judge metrics that need an expected answer
TEXT_KEYS = ("text", "content", "page_content", "chunk")
ID_KEYS = ("doc_id", "id", "source", "document_id")


@dataclass(frozen=True)
class Sampled:
    """One judged (or failed) record of a window's sample."""

    where: str  # file:line
    query: str
    answer: str
    judgement: Judgement | None = None
    failure: str = ""


def hits_of(contexts: Sequence[Any]) -> tuple[Hit, ...]:
    """Retrieved contexts (strings, or objects with a text and optionally a document id and score) as Hits."""
    hits = []
    for rank, context in enumerate(contexts, start=1):
        if isinstance(context, dict):
            text = next((str(context[k]) for k in TEXT_KEYS if context.get(k)), "")
            doc_id = next((str(context[k]) for k in ID_KEYS if context.get(k)), f"context-{rank}")
            score = context.get("score")
        else:
            text, doc_id, score = str(context), f"context-{rank}", None
        score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else 0.0
        hits.append(Hit(Chunk(f"{doc_id}#{rank}", doc_id, text), score, rank))
    return tuple(hits)


class SampleJudge:
    """`judge_all(items)` judges (where, query, contexts, answer) records, `concurrency(judge)` at
    a time, each judgement cached by the pipeline's `Work` under the same kind of key as the
    pipeline's judgements."""

    def __init__(self, judge, work, settings: dict):
        self.judge, self.work, self.settings = judge, work, settings
        self.metrics = tuple(m for m in judge.metrics if m not in NEEDS_EXPECTED)

    def judge_all(self, items: list[tuple[str, str, list, str]]) -> list[Sampled]:
        return map_concurrently(self.one, items, concurrency(self.judge), desc="judging sample")

    def one(self, item: tuple[str, str, list, str]) -> Sampled:
        where, query, contexts, answer_text = item
        if not query.strip() or not answer_text.strip():
            return Sampled(where, query, answer_text, failure=f"no {'query' if not query.strip() else 'answer'} in the record")
        question, hits, answer = Question(where, query, ()), hits_of(contexts), Answer(answer_text)
        key = key_of("judgement", self.settings, query, (), [(h.chunk.chunk_id, h.chunk.text) for h in hits], answer_text)
        try:
            judgement = self.work.cached("judgement", key, self.judge.judge, question, hits, answer)
        except RagexpError:
            raise
        except QuestionFailed as err:
            return Sampled(where, query, answer_text, failure=str(err))
        except Exception as err:
            return Sampled(where, query, answer_text, failure=f"judging failed: {type(err).__name__}: {err}")
        return Sampled(where, query, answer_text, judgement)

    def window_scores(self, judged: Sequence[Sampled]) -> dict[str, float]:
        """`avg_<metric>` over a window's judged records, `hallucination_rate`, and the counts."""
        ok = [s.judgement for s in judged if s.judgement is not None]
        scores: dict[str, float] = {"judged_records": len(ok), "judge_failures": len(judged) - len(ok)}
        if ok:
            for metric in self.metrics:
                values = [j.scores[metric] for j in ok if metric in j.scores]
                if values:
                    scores[f"avg_{metric}"] = round(statistics.fmean(values), 4)
            scores["hallucination_rate"] = round(statistics.fmean(float(j.hallucination) for j in ok), 4)
        return scores
