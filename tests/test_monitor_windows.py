"""ragexp.monitor's reading and summarising: windows and percentiles against numpy on generated
logs (JSONL and CSV), the bounded-memory sketch, the seeded sample, malformed lines with file:line."""
import json
import random
from collections import Counter, defaultdict
from datetime import datetime, UTC

import numpy as np
import pytest

from ragexp.errors import RagexpError
from ragexp.llm.usage import Prices
from ragexp.monitor.percentiles import Latencies, Sketch, enforce_budget
from ragexp.monitor.records import BlockLines, Columns, LogReader, Malformed
from ragexp.monitor.synthetic import generate
from ragexp.monitor.windows import Reservoir, Summary, window_seconds

PRICES = Prices({"gpt-4o-mini": {"input": 0.15, "output": 0.60}})


def summarise(path, window="1d", sample=0, seed=0, on_error="stop", budget=5_000_000, columns=None):
    malformed = Malformed(on_error)
    summary = Summary(window, sample, seed, budget)
    summary.add(LogReader(path, Columns(columns), malformed))
    return summary, malformed


def expected_windows(path, seconds):
    """Each window's figures computed independently: json module, datetime, numpy."""
    groups = defaultdict(list)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        start = datetime.fromisoformat(row["timestamp"]).timestamp() // seconds * seconds
        groups[start].append(row)
    out = {}
    for start, rows in groups.items():
        latency = np.array([r["latency_ms"] for r in rows])
        errors = Counter(r["error"] for r in rows if r["error"])
        feedback = [r["feedback"] for r in rows if r["feedback"] is not None]
        tokens_in, tokens_out = sum(r["tokens_in"] for r in rows), sum(r["tokens_out"] for r in rows)
        out[start] = {"requests": len(rows), "p50": np.percentile(latency, 50), "p95": np.percentile(latency, 95),
                      "p99": np.percentile(latency, 99), "errors": errors, "satisfaction": np.mean(feedback),
                      "feedback": len(feedback), "tokens": (tokens_in, tokens_out),
                      "cost": (tokens_in * 0.15 + tokens_out * 0.60) / 1e6}
    return out


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "traffic.jsonl"
    return generate(path, 3000, span="3d", degrade_from="0.6", slower=3, errors=0.2, satisfied=0.4)


def test_windows_match_numpy_on_a_generated_log(log_file):
    summary, malformed = summarise(log_file, "1d")
    expected = expected_windows(log_file, 86400)
    windows = summary.ordered()
    assert summary.records == 3000 and malformed.count == 0
    assert [w.start for w in windows] == sorted(expected)
    for window in windows:
        e, stats = expected[window.start], window.stats(PRICES, "gpt-4o-mini")
        assert stats["requests"] == e["requests"]
        for q in (50, 95, 99):
            assert stats[f"latency_p{q}_ms"] == pytest.approx(e[f"p{q}"], abs=1e-3)
        assert (stats["tokens_in"], stats["tokens_out"]) == e["tokens"]
        assert stats["cost_usd"] == pytest.approx(e["cost"], abs=1e-6)
        assert stats["errors"] == sum(e["errors"].values())
        assert stats["error_rate"] == pytest.approx(sum(e["errors"].values()) / e["requests"], abs=1e-6)
        for kind, count in e["errors"].items():
            assert stats[f"error_rate_{kind}"] == pytest.approx(count / e["requests"], abs=1e-6)
        assert stats["feedback_count"] == e["feedback"]
        assert stats["satisfaction_rate"] == pytest.approx(e["satisfaction"], abs=1e-6)
    # the degradation injected from 60% of the span shows in the last day
    first, last = windows[0].stats(PRICES, "x"), windows[-1].stats(PRICES, "x")
    assert last["latency_p95_ms"] > 2 * first["latency_p95_ms"] and last["error_rate"] > 0.1 > first["error_rate"]


def test_hourly_windows_partition_the_records(log_file):
    summary, _ = summarise(log_file, "6h")
    assert sum(w.requests for w in summary.ordered()) == 3000
    assert len(summary.ordered()) == 12
    assert all(w.end - w.start == 6 * 3600 and w.start % (6 * 3600) == 0 for w in summary.ordered())


def test_csv_log_gives_the_same_windows_as_jsonl(tmp_path):
    jsonl = generate(tmp_path / "t.jsonl", 500, span="2d", seed=4, degrade_from="0.5", errors=0.3)
    csv = generate(tmp_path / "t.csv", 500, span="2d", seed=4, degrade_from="0.5", errors=0.3)
    a, _ = summarise(jsonl)
    b, _ = summarise(csv)
    assert [w.stats(PRICES, "m") for w in a.ordered()] == [w.stats(PRICES, "m") for w in b.ordered()]


def test_mapped_columns_and_other_time_forms(tmp_path):
    path = tmp_path / "mapped.jsonl"
    rows = [{"ts": "2026-11-01T10:00:00+02:00", "ms": 100, "fb": "up"},   # 08:00 UTC
            {"ts": 1793491200000, "ms": 300, "fb": "thumbs_down"},      # 2026-11-01T00:00Z in ms
            {"ts": "2026-11-01 23:59:59", "ms": 200, "fb": None, "err": "timeout"},
            {"ts": 1793577600, "ms": 50, "fb": True}]                  # 2026-11-02T00:00Z in s
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, _ = summarise(path, columns={"timestamp": "ts", "latency_ms": "ms", "feedback": "fb", "error": "err"})
    day1, day2 = summary.ordered()
    assert datetime.fromtimestamp(day1.start, UTC).isoformat() == "2026-11-01T00:00:00+00:00"
    s1, s2 = day1.stats(PRICES, "m"), day2.stats(PRICES, "m")
    assert s1["requests"] == 3 and s1["latency_p50_ms"] == 200 and s1["satisfaction_rate"] == 0.5
    assert s1["error_rate_timeout"] == pytest.approx(1 / 3, abs=1e-6)
    assert s2["requests"] == 1 and s2["satisfaction_rate"] == 1.0


def test_sketch_percentiles_are_within_one_percent_and_hold_no_values(log_file):
    summary, _ = summarise(log_file, "1d", budget=0)
    expected = defaultdict(list)
    for line in log_file.read_text().splitlines():
        row = json.loads(line)
        expected[datetime.fromisoformat(row["timestamp"]).timestamp() // 86400 * 86400].append(row["latency_ms"])
    for window in summary.ordered():
        assert not window.latencies.exact and len(window.latencies.values) == 0
        stats = window.latencies.summary()
        for q in (50, 95, 99):
            truth = np.percentile(expected[window.start], q, method="nearest")
            assert abs(stats[f"latency_p{q}_ms"] - truth) <= 0.01 * truth
        assert stats["latency_mean_ms"] == pytest.approx(np.mean(expected[window.start]), abs=1e-3)


def test_budget_moves_the_largest_windows_to_sketches():
    windows = [Latencies() for _ in range(3)]
    for size, latencies in zip((100, 10, 5), windows):
        latencies.values.extend(float(v) for v in range(1, size + 1))
    enforce_budget(windows, 20)
    assert [w.exact for w in windows] == [False, True, True]
    assert windows[0].count == 100 and len(windows[0].values) == 0
    sketch = Sketch()
    sketch.add_many(np.array([0.0, 0.0, 5.0]))
    assert sketch.percentile(0) == 0.0 and sketch.percentile(100) == pytest.approx(5.0, rel=0.01)


def test_reservoir_is_uniform_and_seeded():
    chosen = Counter()
    for trial in range(2000):
        reservoir = Reservoir(10, random.Random(trial))
        for start in range(0, 100, 7):  # offered in batches of 7
            count = min(7, 100 - start)
            reservoir.offer(count, lambda i, start=start: start + i)
        assert len(reservoir.items) == 10 == len(set(reservoir.items))
        chosen.update(reservoir.items)
    assert set(chosen) == set(range(100))
    assert all(0.07 < chosen[i] / 2000 < 0.13 for i in range(100))
    small = Reservoir(10, random.Random(1))
    small.offer(4, lambda i: i)
    assert small.items == [0, 1, 2, 3]


def test_a_window_sample_does_not_depend_on_other_windows(tmp_path, log_file):
    lines = log_file.read_text().splitlines()
    first_day = [line for line in lines if json.loads(line)["timestamp"].startswith("2026-11-01")]
    only = tmp_path / "day1.jsonl"
    only.write_text("\n".join(first_day) + "\n")
    full, _ = summarise(log_file, sample=5, seed=7)
    alone, _ = summarise(only, sample=5, seed=7)
    other_seed, _ = summarise(log_file, sample=5, seed=8)
    day1 = [line for _, line, _ in full.ordered()[0].sample.items]
    assert len(day1) == 5 and day1 == [line for _, line, _ in alone.ordered()[0].sample.items]
    assert day1 != [line for _, line, _ in other_seed.ordered()[0].sample.items]
    # each sampled record is its own line, and errors are never sampled: the judge needs an answer
    sampled = [(line, json.loads(raw)) for w in full.ordered() for _, line, raw in w.sample.items]
    assert len(sampled) == 15 and all(row == json.loads(lines[line - 1]) for line, row in sampled)
    assert all(not row["error"] for _, row in sampled)


def test_malformed_lines_are_counted_with_file_and_line(tmp_path):
    path = generate(tmp_path / "bad.jsonl", 200, span="1d", malformed=3)
    lines = path.read_text().splitlines()
    broken = [n for n, line in enumerate(lines, start=1) if line.startswith("{this")]
    lines[9] = lines[9].replace('"latency_ms": ', '"latency_ms": "fast", "x": ')
    lines[19] = "[1, 2]"
    path.write_text("\n".join(lines) + "\n\n")  # a trailing blank line is not a record
    summary, malformed = summarise(path, on_error="skip")
    assert malformed.count == 5 and summary.records == 195
    text = "\n".join(malformed.examples)
    for n in broken:
        assert f"{path}:{n}: not valid JSON" in text
    assert f"{path}:10: latency_ms 'fast' is not a number" in text
    assert f"{path}:20: expected a JSON object, got list" in text
    with pytest.raises(RagexpError, match=rf"{path}:{min(broken + [10, 20])}: .*monitor.on_error=skip"):
        summarise(path, on_error="stop")


def test_malformed_csv_rows_and_bad_settings(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text("timestamp,latency_ms,feedback\n2026-11-01T00:00:00Z,10,1\nnot a time,5,0\n"
                    "2026-11-01T01:00:00Z,7\n2026-11-01T02:00:00Z,8,maybe\n")
    summary, malformed = summarise(path, on_error="skip")
    assert summary.records == 1 and malformed.count == 3
    assert malformed.examples == [
        f"{path}:3: timestamp 'not a time' is neither ISO 8601 nor seconds since the epoch",
        f"{path}:4: 2 fields, the header has 3",
        f"{path}:5: feedback 'maybe' is not a number, 1/0, true/false or up/down (or empty)",
    ]
    with pytest.raises(RagexpError, match="no column 'time'"):
        summarise(path, columns={"timestamp": "time"})
    with pytest.raises(RagexpError, match="monitor.window"):
        window_seconds("daily")
    with pytest.raises(RagexpError, match="monitor.on_error"):
        Malformed("ignore")
    with pytest.raises(RagexpError, match="monitor.columns: unknown field"):
        Columns({"latency": "x"})


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_feedback_on_a_1_to_5_scale_is_satisfied_from_the_configured_score(tmp_path, suffix):
    given = [5, 4, 3, 1, 2, None, 4.5, 0]
    path = tmp_path / f"log{suffix}"
    times = [f"2026-11-01T0{n}:00:00Z" for n in range(len(given))]
    if suffix == ".csv":
        path.write_text("timestamp,feedback\n" + "".join(f"{t},{'' if v is None else v}\n" for t, v in zip(times, given)))
    else:
        path.write_text("".join(json.dumps({"timestamp": t, "feedback": v}) + "\n" for t, v in zip(times, given)))

    def window(satisfied_from):
        summary = Summary("1d", 0, 0, 5_000_000)
        summary.add(LogReader(path, Columns(None, satisfied_from), Malformed("stop")))
        [day] = summary.ordered()
        return day.feedback_count, day.satisfied

    assert window(4) == (7, 3)  # 5, 4 and 4.5 of the seven given
    assert window(2.5) == (7, 4)
    assert window(None) == (7, 6)  # the default: any number above 0 (1/0, +1/-1 feedback)
    with pytest.raises(RagexpError, match="monitor.feedback_satisfied_from: 'four' is not a number"):
        Columns(None, "four")  # type: ignore[arg-type]


def test_yes_no_feedback_beside_a_scale_keeps_its_meaning(tmp_path):
    path = tmp_path / "log.jsonl"
    rows = [{"timestamp": "2026-11-01T00:00:00Z", "feedback": v} for v in (True, False, 5, 2, "up", "4")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = Summary("1d", 0, 0, 5_000_000)
    summary.add(LogReader(path, Columns(None, 4), Malformed("stop")))
    [day] = summary.ordered()
    assert (day.feedback_count, day.satisfied) == (6, 4)  # true, 5, "up", "4"


def test_the_documented_example_log_reads_cleanly():
    from pathlib import Path

    import ragexp.monitor

    example = Path(ragexp.monitor.__file__).parent / "example.jsonl"
    summary, malformed = summarise(example, sample=3)
    day1, day2 = summary.ordered()
    assert summary.records == 10 and malformed.count == 0
    assert (day1.requests, day2.requests) == (5, 5)
    assert day1.errors == {"retrieval_error": 1} and day2.errors == {"rate_limited": 1}
    assert (day1.feedback_count, day1.satisfied) == (3, 2)  # "down", "up" and 1
    assert all(len(w.sample.items) == 3 for w in (day1, day2))


def test_models_are_priced_per_record_whatever_their_json_type(tmp_path):
    path = tmp_path / "models.jsonl"
    rows = [{"timestamp": "2026-11-01T00:00:00Z", "tokens_in": 1_000_000, "tokens_out": 0, "model": "gpt-4o"},
            {"timestamp": "2026-11-01T01:00:00Z", "tokens_in": 1_000_000, "tokens_out": 1_000_000},
            {"timestamp": "2026-11-01T02:00:00Z", "tokens_in": 0, "tokens_out": 1_000_000, "model": {"name": "x"}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary, _ = summarise(path)
    prices = Prices({"gpt-4o": {"input": 2.5, "output": 10}, "gpt-4o-mini": {"input": 0.15, "output": 0.6}})
    stats = summary.ordered()[0].stats(prices, "gpt-4o-mini")
    assert stats["cost_usd"] == pytest.approx(2.5 + 0.15 + 0.6)  # an unknown model costs 0
    assert (stats["tokens_in"], stats["tokens_out"]) == (2_000_000, 2_000_000)


def test_block_lines_is_a_sequence_of_the_raw_lines():
    block = b'{"a": 1}\n{"b": 2}\n{"a": 1}'
    array = bytearray(b"[" + block + b"]")
    lines = BlockLines(array, np.frombuffer(array, dtype=np.uint8) == ord("\n"), 3)
    assert len(lines) == 3 and list(lines) == [b'{"a": 1}', b'{"b": 2}', b'{"a": 1}']
    assert lines.count(b'{"a": 1}') == 2 and lines.index(b'{"b": 2}') == 1  # Sequence methods, not shadowed
