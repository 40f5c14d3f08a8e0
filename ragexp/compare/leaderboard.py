"""The leaderboard: one entry per configuration, its aggregates with bootstrap CIs over questions,
and a paired test of its objective against the best configuration's, Holm-corrected."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ragexp.compare.metrics import COUNTS, MetricSpec, expensive_judgements, numeric, per_question_overall, specs_for
from ragexp.store.reader import Run, Selection
from ragexp.stats.inference import Interval, PairedTest, bootstrap_ci, holm, paired_test
from ragexp.errors import RagexpError
from ragexp.stats.ppi import FEWEST_EXPENSIVE

IGNORED_PARAMS = {"run_name"}
OWN_TIME = "time_own_s"  # a run's own time: its stages' wall time, model loading apart (ragexp.run.work.own_stage)
REQUESTS = "llm_requests"
NO_CI = (math.nan, math.nan)


@dataclass
class Comparison:
    """A configuration against the best, on the questions both answered."""

    test: PairedTest | None
    shared: int  # questions in both runs
    failed: int  # of those, failed (no value) in either run: left out of the test, counted here
    unmatched: int  # questions in only one of the two runs
    p_holm: float = math.nan
    note: str = ""


@dataclass
class Entry:
    run: Run
    params: dict[str, str]
    values: dict[str, Interval]
    specs: dict[str, MetricSpec]
    question_scores: np.ndarray  # per-question objective (overall: see metrics.per_question_overall)
    comparison: Comparison | None = None
    verdict: str = ""
    judge_sd: float | None = None  # mean over questions of the judge's sd across repeats (objective's scale)
    judge_sd_of_mean: float | None = None  # what that spread does to the run's mean

    @property
    def label(self) -> str:
        return self.run.name

    def value(self, metric: str) -> float:
        interval = self.values.get(metric)
        return interval.estimate if interval is not None else math.nan


@dataclass
class Leaderboard:
    selection: Selection
    objective: str
    maximize: bool
    level: float
    alpha: float
    resamples: int
    seed: int
    entries: list[Entry]
    param_columns: list[str]
    metrics: list[str]
    cost_metric: str | None = None
    time_metric: str | None = None
    notes: list[str] = field(default_factory=list)
    corrected: list = field(default_factory=list)  # --labels: ragexp.compare.corrected.CorrectedMean per run and metric

    @property
    def best(self) -> Entry:
        return self.entries[0]

    @property
    def has_judge_spread(self) -> bool:
        return any(e.judge_sd is not None for e in self.entries)


def build(selection: Selection, objective: str | None = None, maximize: bool = True, level: float = 0.95,
          alpha: float = 0.05, resamples: int = 10_000, seed: int = 0) -> Leaderboard:
    runs = selection.runs
    objective = objective or common_objective(runs)
    if not any(objective in r.metrics for r in runs):
        logged = sorted({m for r in runs for m in r.metrics})
        raise RagexpError(f"objective {objective!r} is not logged by any run (metrics: {', '.join(logged)}); "
                          "choose one with --objective")
    columns, shown = differing_params(runs, sweep_order(selection))
    entries = []
    for run in runs:
        specs = specs_for(run)
        values = {}
        for metric, spec in specs.items():  # a logged aggregate keeps its logged value, with the table's CI
            if spec.where and metric.split("/")[0] != objective:
                continue  # per slice, only the objective gets a CI (the report's per-slice table)
            x = spec.matrix(run.table)
            ci = bootstrap_ci(x, spec.statistic(len(x)), resamples, seed, level)
            values[metric] = Interval(run.metrics.get(metric, ci.estimate), ci.low, ci.high)
        for metric, value in run.metrics.items():
            values.setdefault(metric, Interval(value, *NO_CI))
        entries.append(Entry(run, shown[run.run_id], values, specs, per_question_overall(run, specs.get(objective))))
    sign = 1.0 if maximize else -1.0
    entries.sort(key=lambda e: (math.isnan(e.value(objective)), -sign * np.nan_to_num(e.value(objective))))
    board = Leaderboard(selection, objective, maximize, level, alpha, resamples, seed, entries, columns,
                        metric_order(entries, objective), notes=list(selection.notes))
    board.cost_metric = next((m for m in board.metrics if "cost" in m), None)
    # a configuration's own time (its stages', model loading apart) before any other: comparable across a sweep's jobs
    board.time_metric = OWN_TIME if OWN_TIME in board.metrics else \
        next((m for m in board.metrics if "latency" in m or "time" in m or m.endswith("_s")), None)
    compare_with_best(board)
    for entry in entries:
        judge_spread(entry, objective)
    few = [(e.label, n) for e in entries if (judged := e.specs.get(objective)) is not None
           and (n := expensive_judgements(e.run, judged)) is not None and n < FEWEST_EXPENSIVE]
    if few:
        board.notes.append(f"{', '.join(f'{label} rests on {n}' for label, n in few)} expensive judgement(s) of its "
                           f"cascade: fewer than {FEWEST_EXPENSIVE}, too few for its interval and tests to hold (raise judge.sample)")
    for run in runs:
        judged_without = scored_without_contexts(run)
        if judged_without:
            board.notes.append(f"{run.name}: its overall_score was computed the old way, before the rule that a question "
                               f"answered without contexts is not judged on them: {judged_without} such questions have "
                               "context metrics (faithfulness, ...) scored and counted in it; run it again to compare "
                               "it with runs made since")
    fingerprints = {r.tags.get("dataset_fingerprint") for r in runs}
    if len(fingerprints) > 1:
        board.notes.append(f"the runs used {len(fingerprints)} different datasets (dataset_fingerprint tags): "
                           "paired tests use the questions they share")
    return board


CONTEXT_BOUND = ("faithfulness", "context_relevance")  # judged on the contexts by every judge that gives them


def scored_without_contexts(run: Run) -> int:
    """How many judged questions of a run logged before the no-contexts rule were scored on context
    metrics with no contexts given: a run since then leaves them unscored (null), and its table has
    a `not_judged` column when some were; an older run has neither."""
    table = run.table
    if table is None or "retrieved_chunks" not in table or "not_judged" in table:
        return 0
    judged = table["status"] == "judged" if "status" in table else np.ones(len(table), dtype=bool)
    without = table["retrieved_chunks"].astype(str).isin(["[]", ""])
    scored = np.zeros(len(table), dtype=bool)
    for metric in CONTEXT_BOUND:
        if metric in table:
            scored |= ~np.isnan(numeric(table[metric]))
    return int((judged & without & scored).sum())


def common_objective(runs: list[Run]) -> str:
    """The `objective` the runs were configured with, when they agree; else overall_score."""
    chosen = {o for r in runs if (o := r.params.get("objective")) is not None}
    return chosen.pop() if len(chosen) == 1 else "overall_score"


def metric_order(entries: list[Entry], objective: str) -> list[str]:
    names = list(dict.fromkeys(m for e in entries for m in e.values if "/" not in m))  # slices: see slice_metrics
    logged = sorted(m for m in names if not m.startswith("mean ") and m not in COUNTS and m != objective)
    derived = sorted(m for m in names if m.startswith("mean "))
    return [objective] + logged + derived


def slice_metrics(board: Leaderboard) -> list[str]:
    """The objective per slice of the questions (`overall_score/kind/procedural`), as the runs logged it."""
    return sorted({m for e in board.entries for m in e.values if m.startswith(f"{board.objective}/")})


def compare_with_best(board: Leaderboard) -> None:
    best = board.best
    spec_best = best.specs.get(board.objective)
    best.verdict = "best"
    tested: list[tuple[Entry, Comparison, float]] = []  # with the p-value of its test against the best
    for entry in board.entries[1:]:
        spec = entry.specs.get(board.objective)
        if spec_best is None or spec is None or not spec.same_as(spec_best):
            why = ("no per-question values reproduce the logged objective" if spec is None or spec_best is None
                   else "the objective is computed differently (different weights)")
            entry.comparison = Comparison(None, 0, 0, 0, note=why)
            entry.verdict = "not tested"
            continue
        comparison = entry.comparison = paired(entry.run, best.run, spec, board)
        if comparison.test is not None:
            tested.append((entry, comparison, comparison.test.p_value))
        else:
            entry.verdict = "not tested"
    for (entry, comparison, _), adjusted in zip(tested, holm([p for _, _, p in tested])):
        comparison.p_holm = adjusted
        entry.verdict = verdict(comparison, adjusted, board.alpha)


UNCLEAR = "worse before Holm"  # the difference's interval excludes 0, the corrected test does not reject


def verdict(comparison: Comparison, p_holm: float, alpha: float) -> str:
    """`worse` when the Holm-corrected test rejects at `alpha`; `≈ best` only when it does not and
    the difference's interval holds 0; else UNCLEAR (significant on its own, not after the
    correction for the other comparisons), so that no row reads "≈ best" beside an interval that
    says otherwise."""
    if p_holm < alpha:
        return "worse"
    difference = comparison.test.difference if comparison.test is not None else None
    if difference is not None and not difference.contains(0):
        return UNCLEAR
    return "≈ best"


def paired(run: Run, best: Run, spec: MetricSpec, board: Leaderboard) -> Comparison:
    a_rows, b_rows = first_rows(run), first_rows(best)
    a_usable, b_usable = spec.usable(run.table), spec.usable(best.table)
    shared = [q for q in b_rows if q in a_rows]
    both = [q for q in shared if a_usable[a_rows[q]] and b_usable[b_rows[q]]]
    unmatched = len(set(a_rows) ^ set(b_rows))
    failed = len(shared) - len(both)
    if not both:
        return Comparison(None, len(shared), failed, unmatched, note="no question answered by both runs")
    everything = np.ones(len(run.table), dtype=bool)
    a = spec.matrix(run.table, everything)[[a_rows[q] for q in both]]
    b = spec.matrix(best.table, np.ones(len(best.table), dtype=bool))[[b_rows[q] for q in both]]
    test = paired_test(a, b, spec.statistic(len(both)), board.resamples, board.seed, board.level)
    return Comparison(test, len(shared), failed, unmatched)


def first_rows(run: Run) -> dict[str, int]:
    """question id -> row of its first occurrence in the run's table."""
    rows: dict[str, int] = {}
    for i, q in enumerate(run.table["question_id"].astype(str)):
        rows.setdefault(q, i)
    return rows


def judge_spread(entry: Entry, objective: str) -> None:
    """With judge repeats, `<metric>_std` columns give the judge's spread per question: combined with
    the objective's weights (as if the judge's errors on the metrics were fully correlated)."""
    spec, table = entry.specs.get(objective), entry.run.table
    if spec is None or not all(f"{c}_std" in table for c in spec.inputs[: len(spec.weights) or 1]):
        return

    mask = spec.usable(table)
    weighted = spec.inputs[: len(spec.weights)] if spec.kind == "overall" else spec.inputs[:1]
    weights = spec.weights if spec.kind == "overall" else (1.0,)
    sd = sum(w * numeric(table[f"{c}_std"])[mask] for c, w in zip(weighted, weights))
    sd = sd[~np.isnan(sd)]
    if len(sd) == 0:
        return
    entry.judge_sd = float(sd.mean())
    try:
        repeats = spec.repeats if spec.repeats > 1 else int(entry.run.params.get("judge.repeats", ""))
    except ValueError:
        repeats = 0
    if repeats > 1:
        entry.judge_sd_of_mean = float(np.sqrt(np.sum(sd**2) / repeats) / len(sd))


def sweep_order(selection: Selection) -> list[str]:
    """Keys swept on the command line, in order (from the parent run's tag), to lead the columns."""
    overrides = (selection.parent.tags.get("sweep_overrides", "") if selection.parent else "").split()
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o]


def differing_params(runs: list[Run], lead: list[str]) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The params that tell the runs apart. A component whose class differs is one column (its Hydra
    choice from the overrides, else the option param the run logged, else the class name); its other
    settings are shown only where they differ between runs of the same class."""
    keys = list(dict.fromkeys(k for r in runs for k in r.params if k not in IGNORED_PARAMS))
    differ = [k for k in keys if len({r.params.get(k) for r in runs}) > 1 and not copy_of_other(runs, k, keys)]
    groups = [k[: -len("._target_")] for k in differ if k.endswith("._target_")]
    columns = []
    shown_groups = []
    for key in differ:
        if key in groups:  # the option chosen (param `chunker`: recursive), shown in its group's column
            continue
        owners = [g for g in groups if key.startswith(g + ".") and key != f"{g}._target_"]
        if owners and not differs_within(runs, key, min(owners, key=len)):
            continue
        if key.endswith("._target_"):
            shown_groups.append(key[: -len("._target_")])
            columns.append(shown_groups[-1])
        else:
            columns.append(key)
    groups = shown_groups
    columns.sort(key=lambda c: (lead.index(c) if c in lead else len(lead), c))
    shown = {}
    for run in runs:
        choices = dict(o.lstrip("+~").split("=", 1) for o in run.overrides if "=" in o)
        row = {}
        for column in columns:
            if column in groups:
                target = run.params.get(f"{column}._target_")
                row[column] = choices.get(column) or run.params.get(column) or (target.rsplit(".", 1)[-1] if target else "—")
            else:
                row[column] = run.params.get(column, "—")
        shown[run.run_id] = row
    return columns, shown


def copy_of_other(runs: list[Run], key: str, keys: list[str]) -> bool:
    """`retriever.embedder.name` is a copy of `embedder.name` (an interpolation) when they agree
    wherever the key is set."""
    parts = key.split(".")
    for i in range(1, len(parts)):
        other = ".".join(parts[i:])
        if other in keys and all(r.params.get(other) == r.params[key] for r in runs if key in r.params):
            return True
    return False


def differs_within(runs: list[Run], key: str, group: str) -> bool:
    by_class: dict[str | None, set] = {}
    for run in runs:
        by_class.setdefault(run.params.get(f"{group}._target_"), set()).add(run.params.get(key))
    return any(len(values) > 1 for values in by_class.values())
