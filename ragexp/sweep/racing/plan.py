"""A race's plan, checked before any job: the sweeper's settings, the grid, the objective and the
round sizes. Every problem is one line; `plan` raises them all at once (exit 2, bad input)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from ragexp.errors import RagexpError
from ragexp.config.overrides import point_name
from ragexp.stats.ppi import FEWEST_EXPENSIVE

# the per-question aggregates any run gives besides its judge's and metrics' (ragexp.metrics.scoring)
ALWAYS = ("overall_score", "hallucination_rate")


@dataclass(frozen=True)
class Settings:
    """The sweeper's settings (conf/hydra/sweeper/racing.yaml), as `hydra.sweeper.<name>=...`."""

    # geometric, x1.5 from 4% (chosen on tuning grids, not the bench's: bench/results/racing.md)
    rounds: tuple[float, ...] = (0.04, 0.06, 0.09, 0.135, 0.2, 0.3, 0.45, 0.675, 1.0)
    min_questions: int = 20
    objective: str = "overall_score"
    maximize: bool = True
    alpha: float = 0.05
    control: str = "round"  # what alpha bounds: the chance of a wrong drop in each round, or in the whole race
    keep_top: int = 1
    seed: int = 0
    resamples: int = 2000
    max_batch_size: int | None = None
    min_expensive: int = FEWEST_EXPENSIVE  # judge=cascade: the fewest expensive judgements a configuration is tested on

    def problems(self) -> list[str]:
        errors = []
        rounds = self.rounds
        if not rounds or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rounds):
            return [f"hydra.sweeper.rounds: a list of shares of the questions, e.g. [0.1, 0.25, 0.5, 1.0]; got {list(rounds)}"]
        if any(not 0 < r <= 1 for r in rounds):
            errors.append(f"hydra.sweeper.rounds: every share must be in (0, 1]; got {list(rounds)}")
        elif any(b <= a for a, b in zip(rounds, rounds[1:])):
            errors.append(f"hydra.sweeper.rounds: the rounds must grow (each share above the one before); got {list(rounds)}")
        elif rounds[-1] != 1:
            errors.append(f"hydra.sweeper.rounds: the last round must be 1.0 (the full set: the survivors' "
                          f"leaderboard is on every question); got {list(rounds)}")
        if not isinstance(self.min_questions, int) or self.min_questions < 2:
            errors.append(f"hydra.sweeper.min_questions: a whole number >= 2; got {self.min_questions!r}")
        if not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            errors.append(f"hydra.sweeper.alpha: a significance level in (0, 1); got {self.alpha!r}")
        if self.control not in ("race", "round"):
            errors.append(f"hydra.sweeper.control: race (alpha bounds a wrong drop in the whole race) or round "
                          f"(in each round); got {self.control!r}")
        if not isinstance(self.keep_top, int) or isinstance(self.keep_top, bool) or self.keep_top < 1:
            errors.append(f"hydra.sweeper.keep_top: a whole number >= 1 (the best N are never dropped); got {self.keep_top!r}")
        if not isinstance(self.resamples, int) or self.resamples < 100:
            errors.append(f"hydra.sweeper.resamples: a whole number >= 100; got {self.resamples!r}")
        if not isinstance(self.maximize, bool):
            errors.append(f"hydra.sweeper.maximize: true or false; got {self.maximize!r}")
        if not isinstance(self.min_expensive, int) or isinstance(self.min_expensive, bool) or self.min_expensive < 2:
            errors.append(f"hydra.sweeper.min_expensive: a whole number >= 2 (the expensive judgements a cascade's "
                          f"configuration is tested on); got {self.min_expensive!r}")
        if self.max_batch_size is not None and (not isinstance(self.max_batch_size, int) or self.max_batch_size < 1):
            errors.append(f"hydra.sweeper.max_batch_size: null or a whole number >= 1; got {self.max_batch_size!r}")
        return errors


def round_sizes(rounds: tuple[float, ...], min_questions: int, total: int) -> list[int]:
    """Questions per round: each share of `total`, rounded up, at least `min_questions`, at most
    `total`; a round that the minimum makes as large as the one before is merged with it."""
    sizes: list[int] = []
    for share in rounds:
        size = min(total, max(min_questions, math.ceil(share * total)))
        if not sizes or size > sizes[-1]:
            sizes.append(size)
    return sizes


@dataclass
class Plan:
    settings: Settings
    points: list[list[str]]  # each configuration's overrides (the grid, as Hydra's basic sweeper enumerates it)
    names: list[str]  # each configuration's swept values, its runs' name, e.g. "bm25 · top_k=5" (retriever=bm25,retriever.top_k=5)
    total: int  # questions in the full set
    sizes: list[int]  # questions per round
    sample_seed: int  # question_sample.seed: the order the rounds' questions are taken in
    notes: list[str] = field(default_factory=list)

    def definition(self) -> dict[str, Any]:
        """What makes a race the same race (a resumed sweep must match it)."""
        return {"settings": asdict(self.settings), "points": self.points, "total": self.total, "sizes": self.sizes,
                "sample_seed": self.sample_seed}

    @property
    def round_alpha(self) -> float:
        """The level every round's Holm-corrected tests are held to: alpha itself with control=round;
        with control=race, the level that keeps the chance of any wrong drop over all the rounds that
        drop (all but the last) at alpha (ragexp.sweep.racing.sequential)."""
        from ragexp.sweep.racing.sequential import round_level

        alpha = self.settings.alpha
        if self.settings.control != "race":
            return alpha
        return round_level(tuple(self.sizes[:-1]), alpha, max(len(self.points) - 1, 1))

    @property
    def any_round_rate(self) -> float:
        """For a configuration exactly as good as the best, compared alone: the chance that some
        dropping round's test falls below round_alpha (ragexp.sweep.racing.sequential.any_round_rate)."""
        from ragexp.sweep.racing.sequential import any_round_rate

        return any_round_rate(tuple(self.sizes[:-1]), self.round_alpha)

    @property
    def full_grid_evaluations(self) -> int:
        return len(self.points) * self.total


def settings_of(sweeper_config) -> Settings:
    from omegaconf import OmegaConf

    given = OmegaConf.to_container(sweeper_config, resolve=True)
    assert isinstance(given, dict)
    known = {k: v for k, v in given.items() if k in Settings.__dataclass_fields__}
    if isinstance(known.get("rounds"), list):
        known["rounds"] = tuple(known["rounds"])
    return Settings(**known)


# settings that decide which questions a job runs and what it scores: swept, every grid point is composed to check them
SCORING_GROUPS = ("dataset", "question_sample", "judge", "metrics", "weights", "experiment", "llm", "objective")
PLANNED: dict[str, Plan] = {}  # sweep folder -> its plan: made in on_multirun_start, used by the sweeper


def planned(config, keep: bool = True) -> Plan:
    """The plan of this sweep made earlier in this process (by the sweep's callback), else a new
    one; `keep`: left for the next call (the callback), or taken (the sweeper)."""
    from pathlib import Path

    key = str(Path(str(config.hydra.sweep.dir)).absolute())
    made = PLANNED.pop(key, None) or plan(config)
    if keep:
        PLANNED[key] = made
    return made


def plan(config) -> Plan:
    """The race of a multirun's `config` (its hydra.sweeper and command line), or a RagexpError
    listing every problem: the settings, fewer than two configurations, an objective that the jobs
    do not give per question, a minimum above the dataset's size."""
    from ragexp.sweep.folder import grid_points, swept_keys

    settings = settings_of(config.hydra.sweeper)
    errors = settings.problems()
    known = {*Settings.__dataclass_fields__, "_target_", "params"}
    errors += [f"hydra.sweeper.{key}: unknown setting; the racing sweeper takes {', '.join(Settings.__dataclass_fields__)}"
               for key in config.hydra.sweeper if key not in known]
    raw = grid_points(config)
    # a job's sample is the race's (the round's size): any question_sample on the command line sets the full set
    points = [[o for o in point if not o.lstrip("+~").startswith("question_sample.")] for point in raw]
    swept = swept_keys(config)
    names = [configuration_name(point, swept) for point in points]
    if len(points) < 2:
        errors.append(f"a racing sweep needs at least two configurations to race; the command line gives "
                      f"{len(points)} (sweep some values, e.g. retriever=bm25,dense)")
    total, sample_seed, cascade_samples = 0, 0, []
    if points:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        # the objective and the dataset are checked on each distinct scoring setup: every point when the sweep
        # varies one (a judge, the metrics, ...), else the first point stands for all
        scoring = any(k.lstrip("+~").split(".")[0].split("@")[0] in SCORING_GROUPS for k in swept)
        jobs = [loader.load_sweep_config(config, list(point)) for point in (raw if scoring else raw[:1])]
        errors += objective_problems(jobs, settings.objective)
        samples = [cascade_sample(job) for job in jobs]
        cascade_samples = samples if scoring else samples * len(points)
        errors += [f"judge.sample={s:g} expensive judgements per job is below hydra.sweeper.min_expensive="
                   f"{settings.min_expensive}, the fewest a race tests a cascade on: raise judge.sample, or give it as a "
                   f"share (e.g. 0.1)" for s in dict.fromkeys(samples) if s is not None and s >= 1 and s < settings.min_expensive]
        total, sample_seed, size_errors = full_set(jobs)
        errors += size_errors
        if total and isinstance(settings.min_questions, int) and settings.min_questions > total:
            errors.append(f"hydra.sweeper.min_questions={settings.min_questions} is above the dataset's {total} "
                          "questions; lower it or race on a larger dataset")
    if errors:
        raise RagexpError(errors[0] if len(errors) == 1 else
                          f"{len(errors)} problems in the racing sweep:\n  " + "\n  ".join(errors))
    least = max(settings.min_questions, first_cascade_round(cascade_samples, settings.min_expensive))
    sizes = round_sizes(settings.rounds, least, total)
    notes = []
    if len(sizes) < len(settings.rounds):
        why = (f"min_questions={settings.min_questions}" if least == settings.min_questions else
               f"judge=cascade: judge.sample={min(s for s in cascade_samples if s is not None and s < 1):g} draws the "
               f"{settings.min_expensive} expensive judgements a test needs (hydra.sweeper.min_expensive) from {least} "
               "questions on")
        notes.append(f"rounds of {', '.join(map(str, sizes))} questions: {len(settings.rounds) - len(sizes)} of the "
                     f"{len(settings.rounds)} rounds merged, as {why}")
    return Plan(settings, points, names, total, sizes, sample_seed, notes)


def first_cascade_round(samples: list[float | None], min_expensive: int) -> int:
    """The fewest questions a race of cascades starts on: where each configuration's share draws
    min_expensive expensive judgements (expected), so that its first round can be tested. The share
    stays the same in every round, so the draws are nested (a question's chance stays about the same,
    and so does its uniform number: drawn in a round, it is drawn in the next, its expensive judgement
    read from the cache); a smaller first round would draw a larger share, mostly spent in vain."""
    shares = [s for s in samples if s is not None and s < 1]
    return math.ceil(min_expensive / min(shares) - 1e-9) if shares else 0


def cascade_sample(job) -> float | None:
    """A composed job's judge.sample when its judge is a cascade, else None."""
    judge = job.get("judge") or {}
    return float(judge["sample"]) if str(judge.get("_target_", "")).endswith("CascadeJudge") else None


def configuration_name(point: list[str], swept: list[str]) -> str:
    """The swept values, as a job of the sweep names its run (ragexp.run.job.run_name)."""
    return point_name(point, swept) or " ".join(point)


def per_question_aggregates(job) -> set[str]:
    """The aggregates a job's config gives per question (those a paired test can race on): a rubric
    beside the judge adds its criteria."""
    from ragexp.config.build import build
    from ragexp.metrics.relevance import CONTEXT_METRICS
    from ragexp.metrics.scoring import aggregate_key

    judge, metric_set = build(job.judge), build(job.metrics)
    answer = [*metric_set.answer_metrics(), "generation_score"]
    criteria = list(job.rubric.criteria) if job.get("rubric") is not None else []
    return ({aggregate_key(m) for m in (*judge.metrics, *answer, *criteria)}
            | {aggregate_key(n, retrieval=True) for n in (*metric_set.names, *CONTEXT_METRICS)} | set(ALWAYS))


def objective_problems(jobs: list, objective: str) -> list[str]:
    """The objective must be a per-question score of every configuration (checked once per distinct
    judge and metrics)."""
    import json

    from omegaconf import OmegaConf

    seen: dict[str, set[str]] = {}
    for job in jobs:
        key = json.dumps([OmegaConf.to_container(job[k], resolve=True) if job.get(k) is not None else None
                          for k in ("judge", "metrics", "rubric")], sort_keys=True, default=str)
        if key not in seen:
            try:
                seen[key] = per_question_aggregates(job)
            except Exception as err:  # noqa: BLE001 - reported by the grid's own validation
                seen[key] = set()
                return [f"cannot check the objective: {type(err).__name__}: {err}".splitlines()[0]]
        if objective not in seen[key] and not objective.startswith("mean "):
            given = sorted(seen[key])
            return [f"hydra.sweeper.objective={objective!r} is not a per-question score of these jobs (a race "
                    f"compares configurations question by question); choose one of: {', '.join(given)}"]
    return []


def full_set(jobs: list) -> tuple[int, int, list[str]]:
    """The number of questions every round's sample is taken from (the dataset, after any
    `question_sample.size` on the command line), the sample seed, and problems: the configurations
    must share the dataset and the sample seed (the rounds are the same questions for all)."""
    import json

    from omegaconf import OmegaConf

    from ragexp.config.build import build
    from ragexp.run.work import load

    datasets = {json.dumps(OmegaConf.to_container(j.dataset, resolve=True), sort_keys=True, default=str) for j in jobs}
    samples = {json.dumps(OmegaConf.to_container(j.question_sample, resolve=True), sort_keys=True) for j in jobs
               if "question_sample" in j}
    if len(datasets) > 1 or len(samples) > 1:
        return 0, 0, ["a racing sweep races configurations on one set of questions: do not sweep the dataset "
                      "or question_sample (run one race per dataset)"]
    job = jobs[0]
    sample = build(job.question_sample) if "question_sample" in job else None
    try:
        dataset = load(build(job.dataset), sample)
    except RagexpError as err:
        return 0, 0, [str(err)]
    return len(dataset.questions), (sample.seed if sample is not None else 0), []
