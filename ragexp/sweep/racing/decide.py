"""One round's decisions: every configuration that ran is compared with the round's best on the
questions both judged (a paired permutation test of the objective's difference, with its paired
bootstrap CI: ragexp.stats.inference, as the leaderboard does); the p-values of the round are
Holm-corrected together; a configuration is dropped when its corrected p-value is below `alpha`,
it is worse than the best, and it is not among the `keep_top` best of the round. A configuration
whose job failed is neither kept nor dropped as worse: it is `failed`. A configuration judged by a
cascade is tested only when it and the best rest on `min_expensive` expensive judgements or more:
with fewer, a corrected mean's interval is too often wrong (ragexp.stats.ppi.FEWEST_EXPENSIVE), so
the configuration is kept, not tested."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from types import SimpleNamespace

import numpy as np

from ragexp.compare.leaderboard import first_rows, paired
from ragexp.compare.metrics import MetricSpec, expensive_judgements, per_question_overall, specs_for
from ragexp.store.reader import Run
from ragexp.stats.inference import holm
from ragexp.stats.ppi import FEWEST_EXPENSIVE

BEST, KEPT, DROPPED, KEPT_TOP, NOT_TESTED = "best", "kept", "dropped", "kept (keep_top)", "kept (not tested)"


@dataclass
class Decision:
    config: int
    name: str
    verdict: str  # best | kept | dropped | kept (keep_top) | kept (not tested)
    estimate: float  # the objective on this round's questions
    rank: int  # 1 = the round's best
    against: str = ""  # the round's best, which it was tested against
    difference: float = math.nan  # objective(this) - objective(best), on the questions both judged
    low: float = math.nan  # the difference's paired bootstrap CI
    high: float = math.nan
    effect_size: float = math.nan  # d_z: mean per-question difference / its standard deviation
    p_value: float = math.nan
    p_holm: float = math.nan
    questions: int = 0  # questions in the test
    note: str = ""

    def record(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


def objective_spec(run: Run, objective: str) -> MetricSpec | None:
    return specs_for(run).get(objective)


def decide(runs: dict[int, Run], names: dict[int, str], objective: str, maximize: bool = True, alpha: float = 0.05,
           keep_top: int = 1, resamples: int = 2000, seed: int = 0, level: float = 0.95,
           min_expensive: int = FEWEST_EXPENSIVE) -> list[Decision]:
    """The decisions of one round over the configurations that ran (`runs`: configuration -> its
    run of this round), best first."""
    sign = 1.0 if maximize else -1.0
    resamples = enough_resamples(resamples, len(runs), alpha)
    specs = {c: objective_spec(run, objective) for c, run in runs.items()}
    estimates = {c: spec.value(runs[c].table) if spec is not None else math.nan for c, spec in specs.items()}
    order = sorted(runs, key=lambda c: (math.isnan(estimates[c]), -sign * np.nan_to_num(estimates[c]), c))
    decisions = {c: Decision(c, names[c], KEPT, estimates[c], rank) for rank, c in enumerate(order, start=1)}
    best = order[0]
    decisions[best].verdict = BEST
    settings = SimpleNamespace(resamples=resamples, seed=seed, level=level)
    tested = []
    for c in order[1:]:
        d, spec, best_spec = decisions[c], specs[c], specs[best]
        d.against = names[best]
        if spec is None or best_spec is None or not spec.same_as(best_spec):
            d.verdict = NOT_TESTED
            d.note = (f"no per-question values of {objective}" if spec is None or best_spec is None
                      else f"{objective} is computed differently (different weights) from the best's")
            continue
        few = [(names[x], n) for x in (c, best) if (n := expensive_judgements(runs[x], spec)) is not None and n < min_expensive]
        if few:
            d.verdict = NOT_TESTED
            d.note = "; ".join(f"{name}: {n} expensive judgement(s) of {objective}" for name, n in few) + (
                f", fewer than hydra.sweeper.min_expensive={min_expensive}: too few to test a corrected estimate")
            continue
        comparison = paired(runs[c], runs[best], spec, settings)  # type: ignore[arg-type]  # reads resamples, seed, level
        if comparison.test is None:
            d.verdict, d.note = NOT_TESTED, comparison.note
            continue
        test = comparison.test
        d.difference, d.low, d.high = test.difference.estimate, test.difference.low, test.difference.high
        d.p_value, d.questions = test.p_value, test.n
        d.effect_size = effect_size(runs[c], runs[best], spec)
        tested.append(d)
    for d, adjusted in zip(tested, holm([d.p_value for d in tested])):
        d.p_holm = adjusted
        if adjusted < alpha and sign * d.difference < 0:
            d.verdict = KEPT_TOP if d.rank <= keep_top else DROPPED
    return [decisions[c] for c in order]


def enough_resamples(resamples: int, configurations: int, alpha: float) -> int:
    """At least 4 (k - 1) / alpha permutations per test: a permutation p-value is at least
    1 / (resamples + 1), Holm multiplies the smallest by k - 1, and that floor must stay well below
    alpha, else a large grid could drop nothing whatever the data (at 2000 resamples and alpha 0.05,
    from 101 configurations on)."""
    return max(resamples, math.ceil(4 * max(configurations - 1, 1) / alpha))


def effect_size(run: Run, best: Run, spec: MetricSpec) -> float:
    """Cohen's d_z of the per-question objective (for overall_score a question's weighted score, 0
    when it hallucinated): the mean of the paired differences over their standard deviation."""
    a, b = question_values(run, spec), question_values(best, spec)
    shared = [q for q in a if q in b]
    if len(shared) < 2:
        return math.nan
    diff = np.array([a[q] - b[q] for q in shared])
    sd = float(diff.std(ddof=1))
    return float(diff.mean() / sd) if sd > 0 else math.nan


def question_values(run: Run, spec: MetricSpec) -> dict[str, float]:
    values = per_question_overall(run, spec)
    if len(values) == 0:
        return {}
    ids = run.table["question_id"].astype(str).to_numpy()[spec.usable(run.table)]
    rows = first_rows(run)
    return {q: float(v) for q, v in zip(ids, values) if q in rows}
