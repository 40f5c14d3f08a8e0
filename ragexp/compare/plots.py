"""PNG plots of a leaderboard (matplotlib's Agg canvas via `Figure`, no pyplot, no display)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ragexp.compare.leaderboard import Leaderboard
from ragexp.compare.metrics import COUNTS
from ragexp.base.names import is_bookkeeping

BEST, OTHER, WORSE = "#d95f02", "#1b9e77", "#7570b3"


def figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def colour(verdict: str) -> str:
    return BEST if verdict == "best" else WORSE if verdict == "worse" else OTHER


def draw_all(board: Leaderboard, folder: Path) -> dict[str, Path]:
    """Every plot that applies to this leaderboard, as {name: file}; the caption of each is in report.py."""
    folder.mkdir(parents=True, exist_ok=True)
    made = {}
    for name, draw in (("metrics", metrics_plot), ("distribution", distribution_plot),
                       ("settings", settings_plot), ("quality_vs_cost", quality_vs_cost_plot), ("heatmap", heatmap_plot)):
        fig = draw(board)
        if fig is not None:
            made[name] = folder / f"{name}.png"
            fig.savefig(made[name])
    return made


def legend(ax, loc: str = "best") -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=label)
               for c, label in ((BEST, "best"), (OTHER, "≈ best / worse before Holm / not tested"), (WORSE, "significantly worse"))]
    ax.legend(handles=handles, fontsize=7 if loc == "best" else 9, loc=loc)


def whiskers(interval) -> list | None:
    """errorbar's [[below], [above]] for a CI around the logged value (which rounding can put a hair outside)."""
    if math.isnan(interval.low):
        return None
    return [[max(0.0, interval.estimate - interval.low)], [max(0.0, interval.high - interval.estimate)]]


SHOWN = 25  # configurations drawn per plot, best first: a plot of hundreds is unreadable and huge


def shown(board: Leaderboard) -> list:
    """The leaderboard's first SHOWN entries (best first); every one stays in the report's table."""
    return board.entries[:SHOWN]


def of_all(board: Leaderboard) -> str:
    """A title's note when the plot shows only the best configurations."""
    n = len(board.entries)
    return f" (the best {SHOWN} of {n}; every configuration is in the table)" if n > SHOWN else ""


def swept(board: Leaderboard) -> list[str]:
    """The settings whose values differ between the configurations."""
    return [c for c in board.param_columns if len({e.params.get(c) for e in board.entries}) > 1]


def labels(board: Leaderboard, entries: list) -> tuple[list[str], str]:
    """Each configuration's rank in the table and its values of the settings that differ, and those
    settings' names (said once, beside the axis): far fewer letters to draw and read than each run's
    full name, which is what a board that varies no setting shows."""
    columns = swept(board)
    if not columns:
        return [e.label for e in entries], ""
    rank = {id(e): n for n, e in enumerate(board.entries, start=1)}
    return ([f"#{rank[id(e)]}  " + ", ".join(str(e.params.get(c, "—")) for c in columns) for e in entries],
            "#rank  " + ", ".join(columns))


def same_everywhere(board: Leaderboard, metric: str) -> bool:
    """True when every configuration has the same value of `metric` (a panel of it says nothing)."""
    values = {round(e.value(metric), 9) for e in board.entries if not math.isnan(e.value(metric))}
    return len(values) <= 1 and len(board.entries) > 1


def metrics_plot(board: Leaderboard):
    """One panel per score that differs between configurations: each configuration's value with its
    95% CI as whiskers. The scores every configuration shares are named under the plot with their
    value; the runs' own work counters and timings are in the report's table, not here."""
    scores = [m for m in board.metrics if m not in COUNTS and not is_bookkeeping(m)]
    metrics = [m for m in scores if m == board.objective or not same_everywhere(board, m)]
    shared = [m for m in scores if m not in metrics]
    columns = min(3, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    entries = shown(board)
    n = len(entries)
    fig = figure(4.2 * columns + 1.5, rows * (0.32 * n + 1.3))
    axes = np.atleast_1d(fig.subplots(rows, columns, sharey=True, squeeze=False)).ravel()
    y = np.arange(n)[::-1]
    names, settings = labels(board, entries)
    for ax, metric in zip(axes, metrics):
        groups: dict[tuple[str, bool], list] = {}  # one errorbar call per colour (with a CI or not): far fewer artists
        for yi, entry in zip(y, entries):
            interval = entry.values.get(metric)
            if interval is not None and not math.isnan(interval.estimate):
                spread = whiskers(interval)
                groups.setdefault((colour(entry.verdict), spread is not None), []).append((yi, interval.estimate, spread))
        for (shade, with_ci), mine in groups.items():
            xerr = np.array([s for _, _, s in mine])[:, :, 0].T if with_ci else None
            ax.errorbar([x for _, x, _ in mine], [yi for yi, _, _ in mine], xerr=xerr, fmt="o", color=shade, capsize=3)
        ax.set_title(metric, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_yticks(y, names, fontsize=8)
    if settings:
        fig.supylabel(settings, fontsize=9)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    if len(axes) > len(metrics):  # a free panel holds the legend, where it covers no point
        spare = axes[len(metrics)]
        spare.set_visible(True)
        spare.axis("off")
        legend(spare, "center")
    else:
        legend(axes[0])
    fig.suptitle(f"Aggregates per configuration, {board.level:.0%} bootstrap CI over questions{of_all(board)}",
                 fontsize=11)
    if shared:
        import textwrap

        said = ", ".join(f"{m} {board.best.value(m):.3g}" for m in shared)
        fig.supxlabel(textwrap.fill(f"The same in every configuration (not drawn): {said}", 40 * columns), fontsize=8)
    return fig


def distribution_plot(board: Leaderboard):
    """Per-question objective per configuration: box (quartiles), whiskers, points, mean as a diamond."""
    entries = shown(board)
    data = [e.question_scores for e in entries]
    if not any(len(d) for d in data):
        return None
    n = len(entries)
    fig = figure(8, 0.45 * n + 1.6)
    ax = fig.subplots()
    y = np.arange(n)[::-1]
    present = [i for i, d in enumerate(data) if len(d)]
    ax.boxplot([data[i] for i in present], positions=y[present], orientation="horizontal", widths=0.6,
               showfliers=False, medianprops={"color": "black"})
    rng = np.random.default_rng(0)
    for i in present:
        jitter = rng.uniform(-0.15, 0.15, len(data[i]))
        ax.scatter(data[i], y[i] + jitter, s=8, alpha=0.35, color=colour(entries[i].verdict))
        ax.scatter([np.mean(data[i])], [y[i]], marker="D", color="black", zorder=3, s=25)
    names, settings = labels(board, entries)
    ax.set_yticks(y, names, fontsize=8)
    ax.set_ylabel(settings)
    ax.set_xlabel(f"per-question {board.objective}")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(f"Distribution of per-question {board.objective} (diamond: mean){of_all(board)}", fontsize=11)
    return fig


def quality_vs_cost_plot(board: Leaderboard):
    """Objective (with CI) against the first cost metric logged, else the first time/latency metric."""
    axis = board.cost_metric or board.time_metric
    if axis is None:
        return None
    fig = figure(7, 5)
    ax = fig.subplots()
    named = len(board.entries) <= 10  # beyond, names overlap: a point says its rank in the table
    for rank, entry in enumerate(board.entries, start=1):
        x, q = entry.value(axis), entry.values.get(board.objective)
        if q is None or math.isnan(x) or math.isnan(q.estimate):
            continue
        ax.errorbar(x, q.estimate, yerr=whiskers(q), fmt="o", color=colour(entry.verdict), capsize=3,
                    alpha=1.0 if rank <= SHOWN else 0.35)
        if named or rank <= 10:
            ax.annotate(entry.label if named else f"#{rank}", (x, q.estimate), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
    ax.margins(x=0.3 if named else 0.1)
    legend(ax)
    ax.set_xlabel(axis)
    ax.set_ylabel(board.objective)
    ax.grid(alpha=0.3)
    ax.set_title(f"{board.objective} against {axis}" + ("" if named else " (labels: rank in the table)"), fontsize=11)
    return fig


def settings_plot(board: Leaderboard):
    """Every configuration's objective, one panel per swept setting and one row per value of it:
    how each setting's values fare across the rest of the grid, at any grid size. None for fewer
    than 3 configurations or no setting with two values."""
    columns = swept(board)
    if len(board.entries) < 3 or not columns:
        return None
    values = {c: sorted({str(e.params.get(c)) for e in board.entries}, key=natural) for c in columns}
    tallest = max(len(v) for v in values.values())
    fig = figure(4.5 * len(columns) + 1, 0.45 * tallest + 1.8)
    axes = np.atleast_1d(fig.subplots(1, len(columns), sharex=True, squeeze=False)).ravel()
    rng = np.random.default_rng(0)
    for ax, column in zip(axes, columns):
        rows = values[column]
        for row, value in enumerate(rows):
            mine = [e for e in board.entries if str(e.params.get(column)) == value and not math.isnan(e.value(board.objective))]
            y = len(rows) - 1 - row
            scores = np.array([e.value(board.objective) for e in mine])
            ax.scatter(scores, y + rng.uniform(-0.2, 0.2, len(scores)), s=14, alpha=0.6,
                       color=[colour(e.verdict) for e in mine])
            if len(scores):
                ax.scatter([scores.mean()], [y], marker="D", color="black", zorder=3, s=30)
        ax.set_yticks(range(len(rows))[::-1], rows, fontsize=8)
        ax.set_title(column, fontsize=10)
        ax.set_xlabel(board.objective)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{board.objective} of all {len(board.entries)} configurations by each swept setting "
                 "(dots: configurations; diamond: mean)", fontsize=11)
    return fig


def natural(value: str) -> tuple:
    """Numbers in numeric order (2 before 10), words in alphabetical order, numbers first."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def grid_axes(board: Leaderboard) -> tuple[str, str] | None:
    """The two params of a two-group grid (e.g. chunker x retriever), when the runs form one."""
    columns = board.param_columns
    if len(columns) != 2:
        return None
    cells = [(e.params[columns[0]], e.params[columns[1]]) for e in board.entries]
    if len(set(cells)) != len(cells) or any(len({c[i] for c in cells}) < 2 for i in (0, 1)):
        return None
    return columns[0], columns[1]


def heatmap_plot(board: Leaderboard):
    axes = grid_axes(board)
    if axes is None:
        return None
    rows = list(dict.fromkeys(sorted(e.params[axes[0]] for e in board.entries)))
    columns = list(dict.fromkeys(sorted(e.params[axes[1]] for e in board.entries)))
    grid = np.full((len(rows), len(columns)), np.nan)
    for entry in board.entries:
        grid[rows.index(entry.params[axes[0]]), columns.index(entry.params[axes[1]])] = entry.value(board.objective)
    fig = figure(1.6 * len(columns) + 3, 0.8 * len(rows) + 2)
    ax = fig.subplots()
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis" if board.maximize else "viridis_r", aspect="auto")
    fig.colorbar(image, ax=ax, label=board.objective)
    ax.set_xticks(range(len(columns)), columns)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(axes[1])
    ax.set_ylabel(axes[0])
    best = (board.best.params[axes[0]], board.best.params[axes[1]])
    middle = np.nanmean(grid)
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            text = f"{value:.3f}" + ("\n(best)" if (rows[i], columns[j]) == best else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="black" if (value >= middle) == board.maximize else "white")
    ax.set_title(f"{board.objective}: {axes[0]} x {axes[1]}", fontsize=11)
    return fig
