"""The leaderboard and report on runs made here (no MLflow): which params differ, which aggregates
the per-question tables reproduce, paired tests against the best, failures counted, plots drawn."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from ragexp.compare.leaderboard import build
from ragexp.compare.report import write
from ragexp.store.reader import Run, Selection
from ragexp.metrics.scoring import Aggregate

WEIGHTS = {"context_relevance": 0.3, "answer_similarity": 0.4, "faithfulness": 0.3}


def make_run(name, chunker, retriever, shift=0.0, n=30, seed=0, failed=(), extra=None, hallucinate=(), params=None):
    """A run as `source.select` returns it, with aggregates computed the way ragexp logs them."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        judged = i not in failed
        row = {"question_id": f"q{i:03d}", "question": f"question {i}", "judge": "offline-minilm",
               "status": "judged" if judged else "failed", "failure_reason": "" if judged else "judging failed: boom"}
        for m in WEIGHTS:
            row[m] = float(np.clip(rng.uniform(4, 9) + shift, 1, 10)) if judged else None
        row["hallucination"] = (i in hallucinate) if judged else None
        for column, values in (extra or {}).items():
            row[column] = values[i] if judged else None
        rows.append(row)
    table = pd.DataFrame(rows)
    judged = table[table.status == "judged"]
    metrics = {f"avg_{m}": round(judged[m].mean(), 4) for m in WEIGHTS}
    rate = judged.hallucination.astype(float).mean()
    metrics["hallucination_rate"] = round(rate, 4)
    metrics["total_questions"], metrics["failed_questions"] = float(n), float(len(failed))
    metrics["overall_score"] = round(sum(judged[m].mean() * w for m, w in WEIGHTS.items()) * (1 - rate), 4)
    # and how ragexp says it made them (aggregates.json)
    spec = [Aggregate(f"avg_{m}", (m,), "mean") for m in WEIGHTS] + [
        Aggregate("hallucination_rate", ("hallucination",), "mean"), Aggregate("total_questions", (), "count", "all"),
        Aggregate("failed_questions", (), "count", "failed"),
        Aggregate("overall_score", (*WEIGHTS, "hallucination"), "overall", weights=tuple(WEIGHTS.values()), penalty=True)]
    for column in extra or {}:
        if not column.endswith("_std"):
            metrics[column if column != "cost_usd" else "judge_cost_usd"] = (
                round(judged[column].sum(), 6) if column == "cost_usd" else round(judged[column].mean(), 4))
            spec.append(Aggregate("judge_cost_usd", (column,), "sum") if column == "cost_usd"
                        else Aggregate(column, (column,), "mean", "valued"))
    run_params = {"run_name": name, "objective": "overall_score",
                  "chunker._target_": f"ragexp.components.chunkers.{chunker}", "chunker.chunk_size": "512",
                  "retriever._target_": f"ragexp.components.retrievers.{retriever}", "retriever.top_k": "5",
                  "weights._target_": "ragexp.metrics.scoring.Weights", "weights.hallucination_penalty": "True",
                  **{f"weights.{m}": str(w) for m, w in WEIGHTS.items()}}
    if retriever == "DenseRetriever":
        run_params["retriever.embedder.name"] = "minilm"
    run_params.update(params or {})
    run_id = f"{abs(hash(name)) % 16**32:032x}"
    return Run(run_id, name, "1", seed, run_params, metrics, {"judge": "offline-minilm", "dataset_fingerprint": "f"},
               overrides=[], table=table, aggregation=[a.to_json() for a in spec])


def board_of(*runs, **kwargs):
    return build(Selection("sqlite:///test.db", "ragexp", list(runs)), resamples=2000, **kwargs)


def test_grid_leaderboard_ranks_tests_and_marks():
    runs = [make_run("a", "RecursiveChunker", "DenseRetriever", shift=1.5, seed=1),
            make_run("b", "RecursiveChunker", "BM25Retriever", shift=1.4, seed=4),
            make_run("c", "FixedChunker", "DenseRetriever", shift=-1.0, seed=1),
            make_run("d", "FixedChunker", "BM25Retriever", shift=0.0, seed=2)]
    board = board_of(*runs)
    assert [e.label for e in board.entries] == ["a", "b", "d", "c"]
    # the embedder setting exists only for the dense retriever: it is not a difference of its own
    assert board.param_columns == ["chunker", "retriever"]
    assert board.entries[0].params == {"chunker": "RecursiveChunker", "retriever": "DenseRetriever"}
    verdicts = {e.label: e.verdict for e in board.entries}
    assert verdicts == {"a": "best", "b": "≈ best", "d": "worse", "c": "worse"}
    for entry in board.entries:
        ci = entry.values["overall_score"]
        assert ci.estimate == entry.run.metrics["overall_score"] and ci.low < ci.estimate < ci.high
        assert entry.values["avg_faithfulness"].low < entry.values["avg_faithfulness"].high
        assert np.isnan(entry.values["total_questions"].low)  # counts have no CI
    b = board.entries[1].comparison
    assert b.test.n == 30 and b.failed == 0 and b.unmatched == 0
    assert b.test.difference.contains(0.0) and b.p_holm >= b.test.p_value >= 0.05
    c = board.entries[3].comparison
    assert c.test.difference.high < 0 and c.p_holm < 0.05


def test_failed_questions_are_counted_in_the_pair():
    best = make_run("best", "RecursiveChunker", "BM25Retriever", shift=2.0, failed=(0, 1))
    other = make_run("other", "FixedChunker", "BM25Retriever", failed=(1, 2, 3))
    board = board_of(best, other)
    c = board.entries[1].comparison
    assert c.shared == 30 and c.failed == 4 and c.test.n == 26 and c.unmatched == 0
    assert board.entries[1].values["overall_score"].estimate == other.metrics["overall_score"]


def test_questions_in_one_run_only_are_counted():
    board = board_of(make_run("long", "RecursiveChunker", "BM25Retriever", n=30, shift=1),
                     make_run("short", "FixedChunker", "BM25Retriever", n=20))
    c = board.entries[1].comparison
    assert c.shared == 20 and c.unmatched == 10 and c.test.n == 20


def test_unknown_metrics_are_taken_as_logged_with_cis_where_the_table_reproduces_them():
    n = 30
    rng = np.random.default_rng(3)
    extra = {"hit_rate_at_5": rng.integers(0, 2, n).astype(float).tolist(), "latency_s": rng.uniform(0.1, 2, n).tolist(),
             "cost_usd": rng.uniform(0.001, 0.002, n).tolist()}
    run = make_run("x", "RecursiveChunker", "BM25Retriever", extra=extra, hallucinate=(4, 5))
    run.metrics["mrr"] = 0.5  # logged, but no per-question column: shown without CI
    other = make_run("y", "FixedChunker", "BM25Retriever", extra=extra, shift=-1)
    board = board_of(run, other)
    entry = board.entries[0]
    assert entry.specs["hit_rate_at_5"].kind == "mean"
    assert entry.specs["judge_cost_usd"].kind == "sum"  # a total, reproduced as a sum over questions
    assert entry.specs["hallucination_rate"].inputs == ("hallucination",)
    assert entry.specs["overall_score"].penalty
    assert "latency_s" in entry.values and "mean latency_s" not in entry.values
    assert np.isnan(entry.values["mrr"].low)
    assert entry.values["judge_cost_usd"].low < entry.values["judge_cost_usd"].estimate
    assert board.cost_metric == "judge_cost_usd" and board.time_metric == "latency_s"
    assert {"mrr", "hit_rate_at_5", "judge_cost_usd", "overall_score"} <= set(board.metrics)


def test_a_score_column_without_aggregate_becomes_a_metric():
    extra = {"context_precision": np.linspace(0, 1, 30).tolist()}
    run = make_run("x", "RecursiveChunker", "BM25Retriever", extra=extra)
    del run.metrics["context_precision"]
    board = board_of(run, make_run("y", "FixedChunker", "BM25Retriever", extra=extra))
    assert board.entries[0].values["mean context_precision"].estimate == pytest.approx(0.5)


def test_judge_repeats_spread_is_shown():
    extra = {f"{m}_std": [0.5] * 30 for m in WEIGHTS}
    runs = [make_run(name, chunker, "BM25Retriever", extra=extra, shift=shift, params={"judge.repeats": "3"})
            for name, chunker, shift in (("x", "RecursiveChunker", 1), ("y", "FixedChunker", 0))]
    board = board_of(*runs)
    assert board.has_judge_spread
    entry = board.entries[0]
    assert entry.judge_sd == pytest.approx(0.5)  # weights sum to 1
    assert entry.judge_sd_of_mean == pytest.approx(np.sqrt(30 * 0.25 / 3) / 30)


def test_report_files_markdown_html_json_and_plots(tmp_path):
    runs = [make_run(f"chunker={c},retriever={r}", f"{c.title()}Chunker", f"{r.title()}Retriever",
                     shift=s, seed=i, extra={"latency_s": [0.1 * (i + 1)] * 30})
            for i, (c, r, s) in enumerate((("recursive", "dense", 1.0), ("recursive", "bm25", 0.8),
                                           ("fixed", "dense", 0.0), ("fixed", "bm25", -0.5)))]
    for run in runs:  # the Hydra choices, as logged in overrides.yaml
        run.overrides = [o for o in run.name.split(",")]
    board = board_of(*runs)
    assert board.entries[0].params == {"chunker": "recursive", "retriever": "dense"}
    files = write(board, tmp_path / "report")
    assert {"markdown", "html", "json", "metrics", "distribution", "settings", "quality_vs_cost", "heatmap"} == set(files)
    for name in ("metrics", "distribution", "settings", "quality_vs_cost", "heatmap"):
        assert files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = files["markdown"].read_text()
    assert "| 1 | chunker=recursive,retriever=dense | recursive | dense |" in md
    assert "![heatmap](plots/heatmap.png)" in md and "**best**" in md
    page = files["html"].read_text()
    assert page.count("data:image/png;base64,") == 5
    assert not re.search(r"""(src|href)=["'](?!data:)""", page)  # self-contained: nothing fetched
    data = json.loads(files["json"].read_text())
    assert [e["label"] for e in data["entries"]] == [e.label for e in board.entries]
    assert data["entries"][0]["values"]["overall_score"][0] == runs[0].metrics["overall_score"]


def test_plots_skip_what_does_not_apply(tmp_path):
    board = board_of(make_run("x", "RecursiveChunker", "BM25Retriever", shift=1),
                     make_run("y", "FixedChunker", "BM25Retriever"),
                     make_run("z", "SentenceChunker", "BM25Retriever"))
    files = write(board, tmp_path / "report")
    assert "heatmap" not in files and "quality_vs_cost" not in files  # one swept group; no cost or time logged
    assert "metrics" in files and "distribution" in files


def test_the_metrics_plot_has_a_panel_per_score_that_differs_and_none_for_work_counters_or_timings():
    """A panel where every configuration has the same value (avg_abstention 0 in every run of a
    48-point grid: 11 of its 23 panels) says nothing: such scores are named under the plot."""
    from ragexp.compare.plots import metrics_plot

    runs = [make_run(name, "RecursiveChunker", "BM25Retriever", shift=s) for name, s in (("x", 1), ("y", 0))]
    for run, rate in zip(runs, (0.1, 0.2)):
        run.metrics.update({"work_embedded_texts": 40.0, "time_indexing_s": 1.5, "job_time_s": 3.0, "avg_abstention": 0.0,
                            "hallucination_rate": rate})
    board = board_of(*runs)
    assert "work_embedded_texts" in board.metrics and "job_time_s" in board.metrics  # still in the report's table
    fig = metrics_plot(board)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.axison]
    legends = [ax for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1 and (not legends[0].axison or len(titles) % 3 == 0)  # a free panel holds it when there is one
    assert titles == [m for m in board.metrics if m not in ("work_embedded_texts", "time_indexing_s", "job_time_s",
                                                            "avg_abstention")]
    assert titles[0] == "overall_score" and "hallucination_rate" in titles
    assert "not drawn): avg_abstention 0" in fig._supxlabel.get_text()


def test_plots_of_a_big_grid_draw_its_best_configurations_and_stay_the_same_size():
    """A plot grew 256 px a configuration (50,192 px tall at 192): it draws the best 25 now, says so,
    and the table keeps every configuration."""
    from ragexp.compare.plots import SHOWN, distribution_plot, metrics_plot

    small = board_of(*[make_run(f"r{i:02d}", "RecursiveChunker", "BM25Retriever", shift=i / 30, seed=i) for i in range(SHOWN)])
    big = board_of(*[make_run(f"r{i:02d}", "RecursiveChunker", "BM25Retriever", shift=i / 30, seed=i) for i in range(60)])
    assert len(big.entries) == 60
    for plot in (metrics_plot, distribution_plot):
        assert plot(big).get_size_inches()[1] == plot(small).get_size_inches()[1]
        drawn = [t.get_text() for t in plot(big).axes[0].get_yticklabels()]
        assert drawn == [e.label for e in big.entries[:SHOWN]]
    assert "the best 25 of 60; every configuration is in the table" in metrics_plot(big)._suptitle.get_text()
    assert "the best 25 of 60" in distribution_plot(big).axes[0].get_title()
    assert "of 25" not in metrics_plot(small)._suptitle.get_text()


def test_a_big_grid_is_summarised_per_setting_and_its_points_named_by_rank():
    """Every configuration is drawn in the settings plot (one panel per swept setting, a row per
    value, values in numeric order); quality-vs-cost names the best 10 by their rank in the table
    once names would overlap."""
    from ragexp.compare.plots import quality_vs_cost_plot, settings_plot

    runs = []
    for i, (chunker, k) in enumerate((c, k) for c in ("Recursive", "Fixed", "Sentence") for k in (2, 5, 10, 20)):
        run = make_run(f"chunker={chunker.lower()},retriever.top_k={k}", f"{chunker}Chunker", "BM25Retriever",
                       shift=k / 10, seed=i, extra={"latency_s": [0.01 * (i + 1)] * 30}, params={"retriever.top_k": str(k)})
        runs.append(run)
    board = board_of(*runs)
    fig = settings_plot(board)
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert set(panels) == {"chunker", "retriever.top_k"}
    ticks = sorted((t.get_position()[1], t.get_text()) for t in panels["retriever.top_k"].get_yticklabels())
    assert [text for _, text in ticks][::-1] == ["2", "5", "10", "20"]  # top to bottom, in numeric order
    for ax in panels.values():
        dots = sum(len(c.get_offsets()) for c in ax.collections if len(c.get_offsets()) and c.get_sizes()[0] < 20)
        assert dots == 12  # every configuration, in each panel
    names = [t.get_text() for t in quality_vs_cost_plot(board).axes[0].texts]
    assert names == [f"#{rank}" for rank in range(1, 11)]
    few = board_of(*runs[:3])
    assert [t.get_text() for t in quality_vs_cost_plot(few).axes[0].texts] == [e.label for e in few.entries]
    assert settings_plot(board_of(*runs[:2])) is None


def test_a_row_reads_approximately_best_only_when_its_interval_holds_zero():
    """A difference whose interval excludes 0 read "≈ best" when Holm's correction kept its test from
    rejecting: such a row is "worse before Holm" now."""
    from ragexp.compare.leaderboard import UNCLEAR, Comparison, verdict
    from ragexp.stats.inference import Interval, PairedTest

    def compared(low: float, high: float) -> Comparison:
        return Comparison(PairedTest(Interval((low + high) / 2, low, high), 0.03, 40), 40, 0, 0)

    assert verdict(compared(-0.5, -0.1), p_holm=0.01, alpha=0.05) == "worse"
    assert verdict(compared(-0.5, -0.1), p_holm=0.09, alpha=0.05) == UNCLEAR == "worse before Holm"
    assert verdict(compared(-0.5, 0.2), p_holm=0.4, alpha=0.05) == "≈ best"


def test_each_comparison_says_what_difference_its_questions_detect():
    """The width of a comparison's interval says what it could tell apart: the 'detects' figure, the
    difference found with 80% power, is about 2.8 standard errors and agrees with the t-test planner
    on many questions."""
    from ragexp.compare.report import comparisons_table, detects
    from ragexp.stats.power import detectable, detectable_from_interval

    board = board_of(make_run("a", "A", "R", shift=0.5, n=60, seed=1), make_run("b", "B", "R", shift=0.0, n=60, seed=2))
    c = board.entries[1].comparison
    found = detects(c, board)
    half = (c.test.difference.high - c.test.difference.low) / 2
    assert 1.3 * half < found < 1.6 * half  # (1.96 + 0.84) / 1.96 of the half-width
    table = comparisons_table(board)
    assert "detects (80% power)" in table.headers and f"{found:.3g}" in " ".join(table.rows[1])
    # on 400 questions with differences of spread 1, as the planner's two-sided figure
    error = 1 / 400 ** 0.5
    assert detectable_from_interval(-1.96 * error, 1.96 * error) == pytest.approx(detectable(400, 1.0, alpha=0.025), rel=0.01)


def test_plots_name_a_configuration_by_its_rank_and_the_values_of_the_settings_that_differ():
    """The rows of the metrics and distribution plots carry each configuration's rank in the table
    and its values of the swept settings, whose names are said once beside the axis (a 48-point
    grid's full names were 7,900 letters to draw, most of the metrics plot's time)."""
    from ragexp.compare.plots import distribution_plot, metrics_plot

    runs = [make_run(f"chunker={c},retriever.top_k={k}", c, "BM25Retriever", shift=s, seed=i, params={"retriever.top_k": k})
            for i, (c, k, s) in enumerate((("RecursiveChunker", "3", 1.0), ("SentenceChunker", "5", 0.5),
                                           ("RecursiveChunker", "5", 0.0)))]
    board = board_of(*runs)
    fig = metrics_plot(board)
    drawn = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ranks = [board.entries.index(e) + 1 for e in board.entries]
    assert drawn == [f"#{r}  " + ", ".join(e.params[c] for c in board.param_columns) for r, e in zip(ranks, board.entries)]
    assert drawn[0].startswith("#1  ") and "RecursiveChunker" in drawn[0] and "retriever" not in drawn[0]
    assert fig._supylabel.get_text() == "#rank  " + ", ".join(board.param_columns)
    distribution = distribution_plot(board).axes[0]
    assert [t.get_text() for t in distribution.get_yticklabels()] == drawn
    assert distribution.get_ylabel() == fig._supylabel.get_text()


def test_the_console_says_why_the_winner_wins():
    """The winner with its interval, those tied with it, and the scores that separate it from the
    next, each with both intervals; counts, times and costs never among them."""
    from ragexp.compare.explain import is_score, winner_lines
    from ragexp.compare.report import fmt

    runs = [make_run("a", "RecursiveChunker", "DenseRetriever", shift=1.5, seed=1, extra={"cost_usd": [0.01] * 30}),
            make_run("b", "RecursiveChunker", "BM25Retriever", shift=1.4, seed=4, extra={"cost_usd": [0.02] * 30}),
            make_run("d", "FixedChunker", "BM25Retriever", shift=0.0, seed=2, extra={"cost_usd": [0.03] * 30})]
    for run in runs:
        run.metrics["time_own_s"] = 3.0
    board = board_of(*runs)
    lines = winner_lines(board)
    best = board.entries[0].values["overall_score"]
    assert lines[0] == f"winner: a, overall_score {fmt(best.estimate)} [{fmt(best.low)}, {fmt(best.high)}]"
    assert lines[1] == "tied with it (≈ best, these questions cannot tell them apart): b"
    assert lines[2] == "what separates it from b (next, ≈ best):"
    shown = [line.split(":")[0].strip() for line in lines[3:]]
    assert shown[0] == "overall_score" and 2 <= len(shown) <= 3
    assert all(is_score(m) for m in shown) and "judge_cost_usd" not in shown and "time_own_s" not in shown
    assert all(" vs " in line and line.count("[") == 2 for line in lines[3:])
    assert lines[3].endswith("(the winner leads)")  # on the objective, by the ranking
    alone = winner_lines(board_of(runs[0]))
    assert len(alone) == 1 and alone[0].startswith("winner: a, overall_score")
    assert not any(is_score(m) for m in ("total_questions", "time_own_s", "job_time_s", "judge_cost_usd",
                                         "llm_requests", "gate_passed", "regression_p_faithfulness", "work_embedded_texts"))


def test_the_leaderboard_times_a_configuration_by_its_own_stages_and_counts_its_requests():
    from ragexp.compare.report import leaderboard_table

    runs = [make_run("a", "RecursiveChunker", "DenseRetriever", shift=1.5, seed=1),
            make_run("b", "RecursiveChunker", "BM25Retriever", shift=1.4, seed=4)]
    for run, own, requests in zip(runs, (2.5, 3.5), (0, 40)):
        run.metrics.update({"time_own_s": own, "job_time_s": 35.0, "llm_requests": requests})
    board = board_of(*runs)
    assert board.time_metric == "time_own_s"
    table = leaderboard_table(board)
    assert table.headers[-2:] == ["time_own_s", "llm_requests"]
    for run in runs:
        run.metrics["llm_requests"] = 0
    assert "llm_requests" not in leaderboard_table(board_of(*runs)).headers  # nothing sent: no column


def test_a_run_scored_the_old_way_is_named_in_the_notes():
    """Before the no-contexts rule, a question answered without contexts had its context metrics
    scored; a run logged then (no `not_judged` column) gets a note, one logged since does not."""
    old = make_run("old", "RecursiveChunker", "BM25Retriever", seed=1)
    old.table["retrieved_chunks"] = ["[]"] * 10 + ['["a context"]'] * 20
    board = board_of(old, make_run("b", "RecursiveChunker", "DenseRetriever", seed=2))
    [note] = [n for n in board.notes if "the old way" in n]
    assert note.startswith("old: its overall_score was computed the old way") and "10 such questions" in note
    since = make_run("since", "RecursiveChunker", "BM25Retriever", seed=1)
    since.table["retrieved_chunks"] = ["[]"] * 10 + ['["a context"]'] * 20
    since.table.loc[:9, ["faithfulness", "context_relevance"]] = None
    since.table["not_judged"] = ['{"faithfulness": "the system gave no contexts"}'] * 10 + [None] * 20
    assert not [n for n in board_of(since).notes if "the old way" in n]
