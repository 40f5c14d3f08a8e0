"""The contract every judge keeps (the LLM judges' shared base is `ragexp.judges.llm_base`), and
what judging a run is given (`Run`; `ragexp.judges.judging.Judging` is the one the pipeline, the
monitor and calibrate make)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ContextManager, Protocol, Sequence

from ragexp.errors import QuestionFailed
from ragexp.types import Answer, Hit, Judgement, Question, QuestionResult

if TYPE_CHECKING:
    from ragexp.metrics.targets import Target


class Judge:
    """What the pipeline needs from a judge (one class per option under conf/judge/):

    - `name`, attached to every score it gives;
    - `metrics`: the names of the scores `judge()` returns for every judged question;
    - `scales`: each metric's (lowest, highest) value, e.g. (1, 10) for the single-call metrics
      and (0, 1) for the RAG triad's. Targets, the quality gate and the generation scorecard
      compare metrics across judges through it; a metric without a scale gets no target and
      cannot be gated on another scale;
    - `judge(question, hits, answer) -> Judgement`: one answered question;
    - `judge_all(items, run)`: every answered question of a run, each a Judgement or the
      QuestionFailed that says why not. The default judges each through the run's stage cache
      (`run.each`); a judge that needs the whole run (a cascade draws its sample from every cheap
      judgement) or does something once for all (the offline judge embeds every text ahead)
      overrides it;
    - `scorecard`: which of its metrics feed the generation scorecard (see
      ragexp.metrics.generation): scorecard part (faithfulness, conciseness, coherence) -> metric.
      Each is mapped onto 0-1 through its scale; a part the judge does not give leaves the
      question without a generation_score. A judge that asks an LLM for 1-5 ratings maps them to
      0-1 as (score - 1) / 4; the offline judge gives estimates (`conciseness_offline`, ...);
    - `needs_reference`: its metrics that compare the answer with a reference answer. A question
      without one (and not marked unanswerable) keeps only the others: the pipeline drops these
      from its judgement (`reference_free`), and their means are over the questions that have one.
    - `needs_contexts`: its metrics that read the contexts the system under test gave (faithfulness,
      context relevance, ...). A question answered without contexts (a function that returns text,
      recorded outputs without a contexts column) keeps only the others and no hallucination verdict:
      nothing was there to judge them on (`context_free`; the run says so once);
    - `verdict_settings`: a yes/no verdict the judge makes by comparing one of its scores with one of
      its settings, verdict -> (score, setting): e.g. {"hallucination": ("claim_hallucination_rate",
      "hallucination_share")} says hallucination is true when claim_hallucination_rate is above
      `judge.hallucination_share` (`verdict_threshold`). `python -m ragexp.calibrate --outputs` fits
      that setting on labelled outputs and prints it as an override; a verdict not listed has no such setting.
    - `weights`: how its metrics make `overall_score` when `weights=judge` is chosen (a judge with
      metrics of its own chooses it in its YAML file: `- override /weights@_global_.weights: judge`);
      `weights_on_unit_scale`: those weights apply to its metrics mapped onto 0-1;
    - `flags_hallucination`: whether its judgements say if the answer hallucinated (False: a
      rubric's, whose `hallucination` is None; the run then has no hallucination_rate and no penalty);
    - `targets`: the targets it gives its own metrics (a rubric's criteria); `untargeted`: aggregates
      no built-in target is about (a rubric's overall_score);
    - `endpoint`: the LLM endpoint it asks (None: it asks none); `sends_requests`: whether it sends any;
      `estimable`: whether a dry run can count its requests (False: they go through another library);
      `roles()`: the judges that ask an LLM, by the role their requests are counted under;
    - `run_files(results)`: the files it adds to the run folder, file name -> text, made from the run's
      judged questions (a cascade with people's labels: the sheet of drawn questions left to label,
      labels_wanted.csv); none by default. A judge made of others adds theirs;
    - `only_in_cascade`: None, or why this judge cannot judge a run alone and what to choose instead
      (people's labels judge a cascade's sample);
    - `scored_by`: the part judge whose scores a logged run's every question carries (a cascade's cheap
      judge), None for the judge itself; `configured_scales(settings)`: the scales a run's `judge`
      settings give (a judge whose metrics its settings name), read from a logged run's config.

    These may be set on the built judge as well as on the class (a rubric judge's come from its config).
    """

    name: str
    metrics: tuple[str, ...] = ()
    scales: dict[str, tuple[float, float]] = {}
    scorecard: dict[str, str] = {}
    needs_reference: tuple[str, ...] = ()
    needs_contexts: tuple[str, ...] = ()
    verdict_settings: dict[str, tuple[str, str]] = {}
    flags_hallucination: bool = True
    weights: dict[str, float] = {}
    weights_on_unit_scale: bool = False
    targets: tuple[Target, ...] = ()
    untargeted: tuple[str, ...] = ()
    endpoint: Any = None  # an Endpoint, or None (typed Any: LLM judges declare it an Endpoint through UsesLLM)
    sends_requests: bool = False
    estimable: bool = True
    only_in_cascade: str | None = None
    scored_by: str | None = None

    def judge(self, question: Question, hits: Sequence[Hit], answer: Answer) -> Judgement:
        raise NotImplementedError

    def judge_all(self, items: Sequence[QuestionResult], run: Run) -> list[Judgement | QuestionFailed]:
        """Every answered question of `items` judged through the run's stage cache, as many at once as
        the judge allows (`run.each`)."""
        return run.each(self, items)

    def planned(self, questions: Sequence[Question]) -> dict[str, set[str]] | None:
        """For a dry run: the questions each role (`roles`) would be asked about, when not every one
        (a cascade's expensive judge, a sample); None: every question."""
        return None

    def planned_notes(self, questions: int) -> tuple[str, ...]:
        """For a dry run: what it cannot count in requests (people's labels to ask for)."""
        return ()

    def roles(self) -> dict[str, Judge]:
        """The judges whose LLM requests this judge makes, by the role they are counted under."""
        return {"judge": self}

    def run_files(self, results: Sequence[QuestionResult]) -> dict[str, str]:
        """The files it adds to the run folder (name -> text), from the run's judged questions."""
        return {}

    def verdict_threshold(self, verdict: str) -> float | None:
        """The setting `verdict` compares its score with (`verdict_settings`), or None."""
        declared = self.verdict_settings.get(verdict)
        value = getattr(self, declared[1], None) if declared else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @classmethod
    def configured_scales(cls, settings: dict) -> dict[str, tuple[float, float]]:
        """The metrics and scales a run's `judge` settings give (the class's `scales` unless its
        settings name its metrics)."""
        return dict(cls.scales)


class Run(Protocol):
    """What a judge is given of the run it judges (`ragexp.judges.judging.Judging`): the settings its
    judgements are keyed under, its stage cache and traced spans, and where notes on how it was
    judged go."""

    settings: dict
    label: str  # the progress line's words: "judging", "judging (cheap)", ...
    questions: frozenset[str]  # the id of every question of the run, answered or not

    def each(self, judge: Judge, items: Sequence[QuestionResult]) -> list[Judgement | QuestionFailed]:
        """Each answered question judged by `judge.judge` through the stage cache (the one cached
        judging path), as many at once as the judge allows, each in its traced span."""
        ...

    def uncached(self, judge: Judge, items: Sequence[QuestionResult]) -> list[QuestionResult]:
        """The answered questions of `items` whose judgement the stage cache does not hold."""
        ...

    def part(self, key: str, label: str | None = None) -> Run:
        """The run as a part judge sees it: its settings `settings[key]` (a cascade's `cheap`), the
        same cache, spans and notes."""
        ...

    def beside(self, settings: dict, label: str | None = None) -> Run:
        """The run as another judge sees it, keyed under its own `settings` (a rubric beside the judge)."""
        ...

    def note(self, text: str) -> None:
        """A note on how the run was judged, printed once with the run's notes."""
        ...

    def span(self, qid: str, name: str, span_type: str, inputs) -> ContextManager:
        """A traced span of question `qid` around a block (a no-op when tracing is off)."""
        ...


def reference_free(judgement: Judgement, judge: Judge) -> Judgement:
    """The judgement without the judge's metrics that need a reference answer (for a question that
    has none), in its repeats too."""
    from dataclasses import replace

    dropped = set(judge.needs_reference)
    if not dropped & set(judgement.scores):
        return judgement
    return replace(judgement, scores={m: v for m, v in judgement.scores.items() if m not in dropped},
                   repeats=tuple(reference_free(r, judge) for r in judgement.repeats))


NO_CONTEXTS = "the system gave no contexts"


def context_free(judgement: Judgement, judge: Judge) -> Judgement:
    """The judgement of an answer given without contexts: without the judge's metrics that read them
    and without a hallucination verdict (in its repeats too); `details["not_judged"]` names what was
    left out and why."""
    from dataclasses import replace

    dropped = [m for m in judge.needs_contexts if m in judgement.scores]
    if judgement.hallucination is not None:
        dropped.append("hallucination")
    if not dropped:
        return judgement
    return replace(judgement, scores={m: v for m, v in judgement.scores.items() if m not in dropped},
                   hallucination=None, repeats=tuple(context_free(r, judge) for r in judgement.repeats),
                   reasoning=f"{NO_CONTEXTS}: {', '.join(dropped)} not judged | {judgement.reasoning}",
                   details={**judgement.details, "not_judged": dict.fromkeys(dropped, NO_CONTEXTS)})


def context(hits: Sequence[Hit]) -> list[tuple[str, str]]:
    """The contexts as a judgement's key reads them: (chunk id, text) in rank order."""
    return [(h.chunk.chunk_id, h.chunk.text) for h in hits]
