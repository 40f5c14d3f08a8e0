"""The monitor's online A/B test (`monitor.ab`): the anytime-valid confidence sequence and its
planner (simulated streams read after every window), and `python -m ragexp.monitor` on synthetic
A/B logs: decisions, alerts, the judged sample per variant, several files, MLflow, bad input."""
import json
import math
import re

import numpy as np
import pytest

from ragexp.errors import RagexpError
from ragexp.monitor.ab import ABSettings, ABTest
from ragexp.monitor.app import monitor
from ragexp.monitor.synthetic import generate
from ragexp.stats.sequential import Moments, half_width, mixture_constant, power
from test_monitor_cli import client, monitor_config

SETTINGS = ABSettings("A", None, 0.05, None, 30, None, ())


def rate_stream(rng, effect: float, p: float, per_window: int, windows: int) -> ABTest:
    """A stream of windows of a 0/1 metric (say satisfaction), control A and variant B."""
    test = ABTest(SETTINGS)
    for w in range(windows):
        test.add(str(w), str(w + 1), {arm: {"m": (Moments.rate(int(rng.binomial(per_window, p + d)), per_window), True)}
                                      for arm, d in (("A", 0.0), ("B", effect))})
    return test


def naive_daily_test_decides(test: ABTest) -> bool:
    """A two-sided z-test at 5% on the records so far, after every window: what peeking does."""
    a = b = Moments()
    for _, _, per in test.windows:
        a, b = a + per["A"]["m"][0], b + per["B"]["m"][0]
        se = math.sqrt(a.variance(True) / a.n + b.variance(True) / b.n)
        if abs(b.mean - a.mean) > 1.96 * se:
            return True
    return False


def test_the_interval_is_where_the_mixture_likelihood_ratio_reaches_one_over_alpha():
    """Inverting the mixture sequential probability ratio test: at the interval's edge its
    statistic sqrt(v / (v + tau2)) exp(tau2 d^2 / (2 v (v + tau2))) equals 1 / alpha."""
    for v, tau2, alpha in ((0.01, 0.08, 0.05), (2.0, 0.5, 0.01), (1e-4, 1e-2, 0.1)):
        d = float(half_width(v, tau2, alpha))
        statistic = math.sqrt(v / (v + tau2)) * math.exp(tau2 * d * d / (2 * v * (v + tau2)))
        assert statistic == pytest.approx(1 / alpha, rel=1e-9)
    # tightest near the planned variance: tau2 = c(alpha) v* minimises the width at v*
    widths = {c: float(half_width(1.0, c, 0.05)) for c in (1.0, mixture_constant(0.05), 50.0)}
    assert widths[mixture_constant(0.05)] < min(widths[1.0], widths[50.0])


def test_a_a_streams_read_after_every_window_rarely_decide_where_daily_t_tests_do():
    rng = np.random.default_rng(7)
    streams = [rate_stream(rng, 0.0, 0.85, 150, 30) for _ in range(300)]
    wrong = sum(s.compare("B", "m", 0.05, plan=False)["decision"] != "no decision yet" for s in streams)
    naive = sum(naive_daily_test_decides(s) for s in streams)
    assert wrong / 300 <= 0.05
    assert naive / 300 >= 0.15  # the same streams, read the usual way


def test_the_planner_promises_the_power_the_test_has():
    """Streams with a planted effect, decided by the monitor's own comparison, against the
    power `power()` promises for that test at the same number of records."""
    rng = np.random.default_rng(11)
    effect, p, n, windows = 0.05, 0.8, 200, 10
    sd = (math.sqrt(p * (1 - p)), math.sqrt((p + effect) * (1 - p - effect)))
    promised = power(effect, sd, (n, n), windows, 0.05, (30 * n, 30 * n))
    results = [rate_stream(rng, effect, p, n, windows).compare("B", "m", 0.05, plan=False) for _ in range(300)]
    for look in (4, 6, 8, 10):  # promised about 0.16, 0.46, 0.71, 0.86: wrong either way is seen
        observed = np.mean([r["decided_at"] is not None and int(r["decided_at"]) < look for r in results])
        assert abs(observed - promised[look - 1]) <= 0.07, (look, observed, promised[look - 1])
    assert 0.3 < promised[5] < 0.7
    assert all(r["decision"] == "better" for r in results if r["decided_at"] is not None)


def test_an_interval_only_narrows_and_an_undecided_metric_says_how_many_more_records():
    rng = np.random.default_rng(3)
    test = rate_stream(rng, 0.02, 0.8, 100, 6)
    result = test.compare("B", "m", 0.05)
    assert result["decision"] == "no decision yet" and result["lower"] < 0 < result["upper"]
    assert isinstance(result["more_records"], int) and result["more_records"] > 1000
    wider = test.compare("B", "m", 0.01, plan=False)  # a smaller alpha: a wider interval
    assert wider["upper"] - wider["lower"] > result["upper"] - result["lower"]


@pytest.fixture(scope="module")
def ab_logs(tmp_path_factory):
    """Four days of an A/B test: variant B 30% slower with 6% errors (A/B), and an A/A stream."""
    folder = tmp_path_factory.mktemp("ab")
    planted = generate(folder / "planted.jsonl", 3000, span="4d", seed=5, variants=("A", "B"), degrade_from="0",
                       degrade_variant="B", slower=1.3, errors=0.06)
    same = generate(folder / "same.jsonl", 3000, span="4d", seed=6, variants=("A", "B"))
    return planted, same


def test_a_planted_effect_is_decided_alerted_and_logged_per_variant(tmp_path, ab_logs, capsys):
    planted, _ = ab_logs
    out = tmp_path / "out"
    cfg = monitor_config(tmp_path, f"monitor.input={planted}", "monitor.ab.control=A", "monitor.judge_sample=3")
    assert monitor(cfg, out) == 3
    result = json.loads((out / "ab.json").read_text())
    decided = {d["metric"]: d for d in result["decisions"]}
    for metric in ("error_rate", "latency_mean_ms"):
        assert decided[metric]["decision"] == "worse" and decided[metric]["lower"] > 0 and decided[metric]["guardrail"]
    assert decided["satisfaction_rate"]["decision"] == "no decision yet"
    assert result["comparisons"] == len(result["decisions"]) and result["alpha_each"] == pytest.approx(
        0.05 / result["comparisons"])
    assert not result["srm"]["mismatch"]
    alerts = json.loads((out / "alerts.json").read_text())["alerts"]
    ab_alerts = [a for a in alerts if a.get("variant") == "B"]
    assert {a["metric"] for a in ab_alerts} == {"error_rate", "latency_mean_ms"}
    assert all(a["severity"] == "CRITICAL" and a["window"] == decided[a["metric"]]["decided_at"] for a in ab_alerts)
    printed = capsys.readouterr().out
    assert "A/B test against control A (anytime-valid; Bonferroni" in printed
    assert "B error_rate (guardrail): WORSE since" in printed
    # the judged sample is drawn per variant per window
    judged = [json.loads(line) for line in (out / "judged.jsonl").read_text().splitlines()]
    assert sorted({(j["window"], j["variant"]) for j in judged}) == sorted(
        {(w, v) for w in {j["window"] for j in judged} for v in "AB"})
    assert len(judged) == 3 * 2 * 4
    windows = json.loads((out / "windows.json").read_text())["windows"]
    assert all(set(w["variants"]) == {"A", "B"} for w in windows)
    assert all(w["metrics"]["judged_records"] == 6 for w in windows)
    assert sum(w["variants"][v]["requests"] for w in windows for v in "AB") == 3000
    assert "## A/B test" in (out / "report.md").read_text() and "![A/B test](ab.png)" in (out / "report.md").read_text()
    assert (out / "ab.png").read_bytes().startswith(b"\x89PNG")
    for d in result["decisions"]:  # the plotted path: a running interval that never widens, ending at the reported one
        widths = [upper - lower for _, _, lower, upper in d["path"]]
        assert widths == sorted(widths, reverse=True)
        assert not d["path"] or d["path"][-1][2:] == [round(d["lower"], 6), round(d["upper"], 6)]
    # MLflow: each window's run holds each variant's metrics; the parent run each decision
    store = client(tmp_path)
    parent = store.get_run(json.loads((out / "alerts.json").read_text())["mlflow_run"])
    assert parent.data.tags["ab.B.error_rate"] == "worse"
    assert parent.data.metrics["ab.B.error_rate.lower"] > 0
    children = store.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.info.run_id for c in children) == sorted(w["run_id"] for w in windows)
    assert all(c.data.metrics["B/requests"] + c.data.metrics["A/requests"] == c.data.metrics["requests"] for c in children)


def test_an_a_a_stream_decides_nothing_and_fires_nothing(tmp_path, ab_logs, capsys):
    _, same = ab_logs
    out = tmp_path / "out"
    assert monitor(monitor_config(tmp_path, f"monitor.input={same}", "monitor.ab.control=A", "monitor.judge_sample=0",
                                  "tracker=none"), out) == 0
    result = json.loads((out / "ab.json").read_text())
    assert {d["decision"] for d in result["decisions"]} == {"no decision yet"}
    assert all(d["lower"] < 0 < d["upper"] for d in result["decisions"])
    assert all(d["more_records"] is not None for d in result["decisions"] if d["effect"])
    assert "no alert" in capsys.readouterr().out
    # the planner reads the test's folder: records to decide a given difference by this very test
    from ragexp.plan import main as plan

    assert plan(["--ab", str(out), "--metric", "satisfaction_rate", "--drop", "0.05"]) == 0
    small = capsys.readouterr().out
    assert plan(["--ab", str(out), "--metric", "satisfaction_rate", "--drop", "0.1"]) == 0
    large = capsys.readouterr().out
    needed = [int(re.search(r"by about (\d+) records", text).group(1)) for text in (small, large)]
    assert small.startswith("satisfaction_rate, B vs A: a difference of 0.05 is decided with 80% chance")
    assert needed[0] > 2 * needed[1] > 0
    assert plan(["--ab", str(tmp_path)]) == 2
    assert "no ab.json in this folder" in capsys.readouterr().err
    assert plan(["--ab", str(out), "--metric", "satisfaction_rate", "--metric", "nope"]) == 2
    assert "--metric nope: the A/B test has no such metric (it has error_rate, " in capsys.readouterr().err


def test_the_decisions_do_not_depend_on_how_the_log_files_were_cut(tmp_path, ab_logs):
    planted, _ = ab_logs
    lines = planted.read_text().splitlines(keepends=True)
    days = tmp_path / "days"
    days.mkdir()
    for part, start in enumerate(range(0, len(lines), 1000)):  # three files, cut anywhere
        (days / f"log-{part}.jsonl").write_text("".join(lines[start:start + 1000]))
    common = ["monitor.ab.control=A", "monitor.judge_sample=2", "tracker=none"]
    assert monitor(monitor_config(tmp_path, f"monitor.input={planted}", *common), tmp_path / "one") == 3
    assert monitor(monitor_config(tmp_path, f"monitor.input={days}/log-*.jsonl", *common), tmp_path / "cut") == 3
    one, cut = (json.loads((tmp_path / name / "ab.json").read_text()) for name in ("one", "cut"))
    assert one["decisions"] and len(one["decisions"]) == len(cut["decisions"])
    for whole, parts in zip(one["decisions"], cut["decisions"]):  # sums added in another order: the last bits differ
        assert parts == {k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in whole.items()}
    judged = [[(j["variant"], j["query"]) for j in map(json.loads, (tmp_path / name / "judged.jsonl").read_text().splitlines())]
              for name in ("one", "cut")]
    assert judged[0] == judged[1]
    # the test's start leaves earlier records out, and says how many
    later = monitor_config(tmp_path, f"monitor.input={planted}", *common, "monitor.ab.start=2026-11-03T00:00:00")
    assert monitor(later, tmp_path / "later") == 3
    late = json.loads((tmp_path / "later" / "ab.json").read_text())
    assert late["records_before_start"] == 1500 and sum(late["srm"]["records"].values()) == 1500


def test_a_sample_ratio_mismatch_is_warned(tmp_path, capsys):
    log = generate(tmp_path / "skewed.jsonl", 2000, span="2d", seed=8, variants=("A", "B"), split=(0.6, 0.4))
    common = [f"monitor.input={log}", "monitor.ab.control=A", "monitor.judge_sample=0", "tracker=none"]
    monitor(monitor_config(tmp_path, *common), tmp_path / "equal")
    assert json.loads((tmp_path / "equal" / "ab.json").read_text())["srm"]["mismatch"]
    assert "note: sample-ratio mismatch (p = " in capsys.readouterr().out
    monitor(monitor_config(tmp_path, *common, "monitor.ab.split={A:0.6,B:0.4}",
                           "monitor.ab.metrics=[error_rate,avg_faithfulness]"), tmp_path / "planned")
    planned = json.loads((tmp_path / "planned" / "ab.json").read_text())
    assert not planned["srm"]["mismatch"]
    assert [d["metric"] for d in planned["decisions"]] == ["error_rate"] and planned["comparisons"] == 1
    assert "note: monitor.ab.metrics: avg_faithfulness not measured on these records" in capsys.readouterr().out


@pytest.mark.parametrize("overrides, message", [
    (["monitor.ab.control=C"], "monitor.ab.control: 'C' is not a variant of the log (A, B)"),
    (["monitor.ab.control=A", "monitor.ab.split={A:1,C:1}"], "monitor.ab.split: names A, C, the log's variants are A, B"),
    (["monitor.ab.control=A", "monitor.ab.alpha=0.7"], "monitor.ab.alpha: 0.7 is not a number between 0 and 0.5"),
    (["monitor.ab.control=A", "monitor.ab.start=yesterday"], "monitor.ab.start: timestamp 'yesterday'"),
    (["monitor.ab.control=A", "monitor.ab.horizon_windows=0"], "monitor.ab.horizon_windows: 0 is not a whole number"),
])
def test_bad_ab_settings_are_one_line_naming_the_setting(tmp_path, ab_logs, overrides, message):
    planted, _ = ab_logs
    with pytest.raises(RagexpError) as raised:
        monitor(monitor_config(tmp_path, f"monitor.input={planted}", "monitor.judge_sample=0", "tracker=none",
                               *overrides), tmp_path / "out")
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_log_with_one_variant_is_refused_with_the_column_to_fix(tmp_path):
    log = generate(tmp_path / "one.jsonl", 200, span="1d", seed=9, variants=("A",))
    with pytest.raises(RagexpError, match=r"monitor.ab.control=A: the log's variant column holds one variant, A; "
                                          r"an A/B test needs two or more \(monitor.columns.variant"):
        monitor(monitor_config(tmp_path, f"monitor.input={log}", "monitor.ab.control=A", "monitor.judge_sample=0",
                               "tracker=none"), tmp_path / "out")


def test_the_synthetic_stream_plants_its_effect_in_one_variant_only(tmp_path):
    log = generate(tmp_path / "ab.csv", 6000, span="2d", seed=4, variants=("A", "B"), degrade_from="0",
                   degrade_variant="B", errors=0.3)
    import csv

    rows = list(csv.DictReader(log.open()))
    share = {v: np.mean([bool(r["error"]) for r in rows if r["variant"] == v]) for v in "AB"}
    assert share["A"] < 0.02 and 0.25 < share["B"] < 0.35
    assert abs(sum(r["variant"] == "A" for r in rows) / len(rows) - 0.5) < 0.03


def test_a_glob_that_matches_no_file_is_one_line(tmp_path):
    (tmp_path / "logs.jsonl").mkdir()  # a folder whose name matches is not a log
    with pytest.raises(RagexpError, match=r"monitor.input: no file matches '.*\*.jsonl'"):
        monitor(monitor_config(tmp_path, f"monitor.input={tmp_path}/*.jsonl", "tracker=none"), tmp_path / "out")
