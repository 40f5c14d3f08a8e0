"""Why the winner wins, in a few lines under a sweep's leaderboard on the console: the winner, the
configurations tied with it (verdict `≈ best`), and the scores that separate it most from the next
configuration, each with both intervals. Scores that separate: the per-question scores and
aggregates (not the counts, times, costs or the gate's bookkeeping), ranked by the gap between
the two estimates over the width their intervals leave (a gap both intervals overlap counts less),
each saying which of the two leads on it: the winner may trail the next on some score."""
from __future__ import annotations

import math

from ragexp.base.names import higher_is_worse, is_bookkeeping
from ragexp.compare.leaderboard import Entry, Leaderboard
from ragexp.compare.metrics import COUNTS

SHOWN = 3  # the scores that separate the winner from the next, the objective among them


def is_score(metric: str) -> bool:
    """An aggregate that scores the answers or the retrieval, not a count, a time, a cost or a gate's record."""
    return not (is_bookkeeping(metric) or metric in COUNTS or "cost" in metric or "/" in metric
                or metric.startswith(("gate_", "regression_p_", "llm_", "judge_", "generator_", "jobs_", "n_"))
                or metric.endswith(("_s", "_std", "_questions", "_tokens")) or metric.startswith("mean "))


def separation(best: Entry, other: Entry, metric: str) -> float:
    """How far apart two configurations are on `metric`: the gap of the estimates over the mean
    half-width of their intervals; NaN without both intervals."""
    a, b = best.values.get(metric), other.values.get(metric)
    if a is None or b is None or any(math.isnan(v) for v in (a.estimate, a.low, b.estimate, b.low)):
        return math.nan
    width = ((a.high - a.low) + (b.high - b.low)) / 4
    gap = abs(a.estimate - b.estimate)
    return gap / width if width > 0 else (math.inf if gap > 0 else 0.0)


def separating(board: Leaderboard, other: Entry, most: int = SHOWN) -> list[str]:
    """The objective and the scores that separate the winner most from `other`, most first."""
    scores = [m for m in board.metrics if m != board.objective and is_score(m)]
    ranked = sorted((s, m) for m in scores if (s := separation(board.best, other, m)) == s and s > 0)
    return [board.objective] + [m for _, m in reversed(ranked)][: most - 1]


def winner_lines(board: Leaderboard) -> list[str]:
    """The winner, those tied with it, and what separates it from the next configuration."""
    from ragexp.compare.report import fmt_ci

    best = board.best
    lines = [f"winner: {best.label}, {board.objective} {fmt_ci(best.values.get(board.objective))}"]
    if len(board.entries) == 1:
        return lines
    tied = [e.label for e in board.entries[1:] if e.verdict == "≈ best"]
    lines.append(f"tied with it (≈ best, these questions cannot tell them apart): {', '.join(tied)}" if tied
                 else "tied with it: none (every other configuration is worse, or worse before Holm)")
    following = board.entries[1]
    lines.append(f"what separates it from {following.label} (next, {following.verdict or 'not tested'}):")
    for metric in separating(board, following):
        lines.append(f"  {metric}: {fmt_ci(best.values.get(metric))} vs {fmt_ci(following.values.get(metric))}"
                     + leader(board, following, metric))
    return lines


def leader(board: Leaderboard, following: Entry, metric: str) -> str:
    """Which of the two is ahead on `metric` (higher is better, but for the hallucination metrics,
    and for the objective as the board ranks it)."""
    ahead, behind = board.best.value(metric), following.value(metric)
    if ahead == behind or math.isnan(ahead) or math.isnan(behind):
        return ""
    lower_better = (not board.maximize) if metric == board.objective else higher_is_worse(metric)
    return " (the winner leads)" if (ahead < behind) == lower_better else " (the next leads)"
