"""The contract every judge keeps."""
from __future__ import annotations

from typing import Sequence

from ragexp.types import Answer, Hit, Judgement, Question


class Judge:
    """What the pipeline needs from a judge (one class per option under conf/judge/):

    - `name`, attached to every score it gives;
    - `metrics`: the names of the scores `judge()` returns for every judged question;
    - `scales`: each metric's (lowest, highest) value, e.g. (1, 10) for the single-call metrics
      and (0, 1) for the RAG triad's. Targets, the quality gate and the generation scorecard
      compare metrics across judges through it; a metric without a scale gets no target and
      cannot be gated on another scale;
    - `judge(question, hits, answer) -> Judgement`.

    Generation metrics (specification 6.4.3): a judge that asks an LLM returns `conciseness` and
    `coherence` (its 1-5 ratings mapped to 0-1 as (score - 1) / 4, scale (0, 1)); a judge without
    an LLM may return estimates named `conciseness_offline` and `coherence_offline`. The
    scorecard takes the LLM's when present, else the estimates.
    """

    name: str
    metrics: tuple[str, ...] = ()
    scales: dict[str, tuple[float, float]] = {}

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise NotImplementedError
