"""The rerank stage, between retrieval and generation: each question's first `reranker.candidates`
retrieved hits reordered by the run's reranker, the rest of the retriever's list after them.

Cached per question under the reranker's settings (with its model's identity), the question and the
candidates it reorders: a sweep over rerankers pays for one retrieval, and each reranker once per
question. The retrieval metrics are then computed on the reranked list; the retriever's own list
and its metrics stay beside them (`QuestionResult.first_stage`) for the audit trail. A question
whose reranking fails (an LLM reply that names unknown candidates twice, an endpoint that gives up)
fails with the reason, and is left out of the retrieval means (counted as excluded)."""
from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Callable, Sequence

from ragexp.store.cache import key_of
from ragexp.base.concurrency import concurrency, map_concurrently
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.store.tracing import documents, ended
from ragexp.types import FirstStage, Hit, QuestionResult

STAGE = "rerank"  # its name in the stage cache (ragexp.run.work.Work.STORED_AS)


def rerank_results(work, reranker, reranker_settings: dict, results: Sequence[QuestionResult],
                   score: Callable[..., QuestionResult]) -> list[QuestionResult]:
    """Each first-stage result reranked and scored again (`score(question, ranked hits)`: the
    pipeline's retrieval scoring), up to the reranker's concurrency at once."""
    identity = reranker.identity()
    one = partial(rerank_question, work, reranker, {"settings": reranker_settings, "identity": identity}, score)
    return map_concurrently(one, results, concurrency(reranker), "reranking")


def rerank_question(work, reranker, key_parts: dict, score: Callable[..., QuestionResult],
                    result: QuestionResult) -> QuestionResult:
    question, retrieved = result.question, list(result.ranked)
    candidates, rest = retrieved[: reranker.candidates], retrieved[reranker.candidates :]
    first = FirstStage(result.ranked, result.ranking, result.retrieval, result.judged)
    key = key_of(STAGE, key_parts, question.text, [(h.chunk.chunk_id, h.chunk.text) for h in candidates])
    inputs = {"query": question.text, "candidates": len(candidates)}
    started = time.perf_counter()
    with work.span(question.qid, "rerank", "RERANKER", inputs) as span:
        try:
            reordered = work.cached(STAGE, key, reranker.rerank, question, candidates, span=span)
            final = [*reordered, *(Hit(h.chunk, h.score, len(reordered) + n) for n, h in enumerate(rest, start=1))]
            reranked = replace(score(question, final), first_stage=first)
        except RagexpError:
            raise
        except QuestionFailed as err:  # its message names the stage ("reranker: ..."); any other exception is a bug: exit 1
            reranked = failed(result, first, str(err))
        reranked = replace(reranked, rerank_s=round(time.perf_counter() - started, 6))
        return ended(span, reranked, documents(reranked.hits) if not reranked.failure else None)


def failed(result: QuestionResult, first: FirstStage, reason: str) -> QuestionResult:
    """A question whose reranking failed: no final ranking, so no retrieval metrics (excluded, counted)."""
    return QuestionResult(result.question, failure=reason, first_stage=first,
                          retrieval_excluded=f"reranking failed: {reason}")
