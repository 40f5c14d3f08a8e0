"""The contract every judge keeps (the LLM judges' shared base is `ragexp.judges.llm_base`)."""
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
    - `judge(question, hits, answer) -> Judgement`;
    - `scorecard`: which of its metrics feed the generation scorecard (see
      ragexp.metrics.generation): scorecard part (faithfulness, conciseness, coherence) -> metric.
      Each is mapped onto 0-1 through its scale; a part the judge does not give leaves the
      question without a generation_score. A judge that asks an LLM for 1-5 ratings maps them to
      0-1 as (score - 1) / 4; the offline judge gives estimates (`conciseness_offline`, ...);
    - `needs_reference`: its metrics that compare the answer with a reference answer. A question
      without one (and not marked unanswerable) keeps only the others: the pipeline drops these
      from its judgement (`reference_free`), and their means are over the questions that have one.
    - `verdict_settings`: a yes/no verdict the judge makes by comparing one of its scores with one of
      its settings, verdict -> (score, setting): e.g. {"hallucination": ("claim_hallucination_rate",
      "hallucination_share")} says hallucination is true when claim_hallucination_rate is above
      `judge.hallucination_share`. `python -m ragexp.calibrate --outputs` fits that setting on
      labelled outputs and prints it as an override; a verdict not listed has no such setting.
    - `weights`: how its metrics make `overall_score` when `weights=judge` is chosen (a judge with
      metrics of its own chooses it in its YAML file: `- override /weights@_global_.weights: judge`);
    - `flags_hallucination`: whether its judgements say if the answer hallucinated (False: a
      rubric's, whose `hallucination` is None; the run then has no hallucination_rate and no penalty).

    These may be set on the built judge as well as on the class (a rubric judge's come from its config).
    """

    name: str
    metrics: tuple[str, ...] = ()
    scales: dict[str, tuple[float, float]] = {}
    scorecard: dict[str, str] = {}
    needs_reference: tuple[str, ...] = ()
    verdict_settings: dict[str, tuple[str, str]] = {}
    flags_hallucination: bool = True

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise NotImplementedError


def reference_free(judgement: Judgement, judge: Judge) -> Judgement:
    """The judgement without the judge's metrics that need a reference answer (for a question that
    has none), in its repeats too."""
    from dataclasses import replace

    dropped = set(judge.needs_reference)
    if not dropped & set(judgement.scores):
        return judgement
    return replace(judgement, scores={m: v for m, v in judgement.scores.items() if m not in dropped},
                   repeats=tuple(reference_free(r, judge) for r in judgement.repeats))
