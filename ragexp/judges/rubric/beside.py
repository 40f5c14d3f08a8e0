"""A rubric judged beside another judge (`rubric=NAME` with judge=llm, triad, offline, ...): the
judge judges the run as it would alone, then the rubric judges the questions the judge judged,
under its own cache key; its scores join the judge's. A question the rubric cannot judge at all
keeps the judge's judgement with the rubric's criteria failed (`failed_criteria`, so the stage
cache does not keep it: a rerun asks the rubric again)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ragexp.errors import QuestionFailed, RagexpError
from ragexp.judges.contract import Judge, Run
from ragexp.judges.rubric.judge import RubricJudge
from ragexp.types import Judgement, QuestionResult


def rubric_beside(judge: Judge, rubric: Any) -> RubricJudge | None:
    """The rubric judge for the `rubric` node built beside `judge`, asking that judge's endpoint when
    it has one; None when the judge is the rubric's own (judge=rubric) or one of a cascade's."""
    if isinstance(judge, RubricJudge):
        return None
    parts = judge.roles().values()
    if any(part is not judge for part in parts):  # a cascade: the rubric may be one of its judges
        if any(isinstance(part, RubricJudge) for part in parts):
            return None
        raise RagexpError("rubric: a rubric beside judge=cascade is not supported; choose the rubric as one of its "
                          "judges (judge@judge.expensive=rubric judge.pairs={CRITERION: CHEAP_METRIC}) or drop rubric=")
    built = RubricJudge(rubric, judge.endpoint, repeats=1, name=None)  # once per question, named after the rubric
    clash = [m for m in built.metrics if m in judge.metrics]
    if clash:
        raise RagexpError(f"rubric.criteria.{clash[0]}: judge {judge.name!r} gives a metric of that name; "
                          "name the criterion otherwise")
    return built


def with_rubric(judge: Judge, rubric: Judge, settings: dict) -> Judge:
    """What judges a run whose rubric is chosen beside its judge: the judge, then the rubric keyed
    under `settings`."""
    return RubricBeside(judge, rubric, settings)


class RubricBeside(Judge):
    """`judge` and, beside it, `rubric` keyed under `settings` (the rubric and the endpoint it borrows)."""

    def __init__(self, judge: Judge, rubric: Judge, settings: dict):
        self.judge_first, self.rubric, self.settings = judge, rubric, settings
        self.name, self.metrics = judge.name, (*judge.metrics, *rubric.metrics)
        self.scales = {**judge.scales, **rubric.scales}
        self.needs_contexts = (*judge.needs_contexts, *rubric.needs_contexts)
        self.flags_hallucination = judge.flags_hallucination

    def judge_all(self, items: Sequence[QuestionResult], run: Run) -> list[Judgement | QuestionFailed]:
        first = self.judge_first.judge_all(items, run)
        judged = [r for r, j in zip(items, first) if isinstance(j, Judgement)]
        extra = iter(self.rubric.judge_all(judged, run.beside(self.settings, f"{run.label} (rubric)")))
        return [joined(j, next(extra), self.rubric) if isinstance(j, Judgement) else j for j in first]

    def run_files(self, results: Sequence[QuestionResult]) -> dict[str, str]:
        return {**self.judge_first.run_files(results), **self.rubric.run_files(results)}


def joined(judgement: Judgement, extra: Judgement | QuestionFailed, rubric: Judge) -> Judgement:
    """The judge's judgement with a rubric's scores and details beside its own (in each repeat too);
    its reasoning follows the judge's. A rubric that failed: its criteria failed, with the reason."""
    if isinstance(extra, QuestionFailed):  # every criterion failed: the judge's judgement stands
        extra = Judgement(rubric.name, {}, None, "", {"failed_criteria": dict.fromkeys(rubric.metrics, str(extra))})
    reasoning = " | ".join(r for r in (judgement.reasoning, f"{extra.judge}: {extra.reasoning}" if extra.reasoning else "") if r)
    details = {**judgement.details, **{k: v for k, v in extra.details.items() if k != "clamped"}}
    if "clamped" in extra.details:
        details["clamped"] = [*judgement.details.get("clamped", []), *extra.details["clamped"]]
    return replace(judgement, scores={**judgement.scores, **extra.scores}, reasoning=reasoning, details=details,
                   repeats=tuple(replace(r, scores={**r.scores, **extra.scores}) for r in judgement.repeats))
