"""The malformed-line rule every reader shares (ragexp.base.json_lines): the monitor's logs and the
recorded outputs count and skip each malformed line with on_error=skip, or refuse it in one line
naming file:line without it; a byte-order mark opening the file is accepted."""
import json
import sys

import pytest

from conftest import CONF, ROOT, call_in, compose, run_app
from ragexp.base.json_lines import MalformedLine, json_record
from ragexp.errors import RagexpError
from ragexp.monitor.records import Columns, LogReader, Malformed
from ragexp.monitor.windows import Summary
from ragexp.config.build import from_yaml

CAP = 1000  # the tests' field cap (the default, 10,000,000 bytes, is the same rule at another size)
DEEP = 100_000
# (name, a line's bytes given its timestamp field's text, what the reason says)
BAD = [
    ("invalid UTF-8", lambda t: b'{%s, "query": "caf\xe9 au lait", "answer": "a"}' % t, "is not UTF-8"),
    ("a lone surrogate", lambda t: b'{%s, "query": "x \\ud800 y", "answer": "a"}' % t, "lone surrogate"),
    ("nested 100,000 deep", lambda t: b'{%s, "query": "q", "meta": %s1%s}' % (t, b"[" * DEEP, b"]" * DEEP), "nested"),
    ("a field over the cap", lambda t: b'{%s, "query": "q", "answer": "%s"}' % (t, b"x" * (CAP + 1)),
     "answer: 1,001 bytes, over the cap of 1,000"),
    ("contexts over the cap", lambda t: b'{%s, "query": "q", "contexts": ["%s", "%s"]}' % (t, b"x" * 600, b"y" * 600),
     "contexts: 1,200 bytes"),
]
TIMES = [("a timestamp of 1e20", b"99999999999999999999"), ("a timestamp in the year 9999", b'"9999-12-31T23:59:59Z"')]


def log_lines(bad: bytes, at: int = 3, count: int = 6) -> bytes:
    good = [json.dumps({"timestamp": f"2026-11-01T00:0{i}:00Z", "latency_ms": 100 + i, "query": f"q{i}",
                        "contexts": [f"c{i}"], "answer": f"a{i}"}).encode() for i in range(count)]
    good[at - 1] = bad
    return b"\n".join(good) + b"\n"


def read_log(path, on_error, sample=0):
    malformed = Malformed(on_error)
    summary = Summary("1d", sample, 0)
    summary.add(LogReader(path, Columns(), malformed, max_field_bytes=CAP))
    return summary, malformed


MONITOR_CASES = [(name, make(b'"timestamp": "2026-11-01T00:02:00Z"'), reason) for name, make, reason in BAD] + [
    (name, b'{"timestamp": %s, "query": "q"}' % stamp, "out of range") for name, stamp in TIMES]


@pytest.mark.parametrize("name,bad,reason", MONITOR_CASES, ids=[c[0] for c in MONITOR_CASES])
def test_the_monitor_counts_and_skips_or_refuses_a_malformed_line(tmp_path, name, bad, reason):
    path = tmp_path / "log.jsonl"
    path.write_bytes(log_lines(bad))
    summary, malformed = read_log(path, "skip", sample=5)
    assert summary.records == 5 and malformed.count == 1
    [example] = malformed.examples
    assert example.startswith(f"{path}:3: ") and reason in example, example
    judged = [line for w in summary.ordered() for _, line, _ in w.sample.items]
    assert sorted(judged) == [1, 2, 4, 5, 6]
    with pytest.raises(RagexpError, match=rf"^{path}:3: .*monitor.on_error=skip"):
        read_log(path, "stop")


def test_a_byte_order_mark_opens_a_log(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + log_lines(json.dumps({"timestamp": "2026-11-01T00:02:00Z"}).encode()))
    summary, malformed = read_log(path, "stop", sample=6)
    assert summary.records == 6 and malformed.count == 0
    assert len([raw for w in summary.ordered() for _, _, raw in w.sample.items]) == 6


def test_a_time_out_of_range_is_a_malformed_line_of_the_command(tmp_path):
    """The whole command: such a time reached the windows' dates and crashed it (exit 1)."""
    from ragexp.monitor.__main__ import main

    path = tmp_path / "log.jsonl"
    path.write_bytes(log_lines(b'{"timestamp": 99999999999999999999, "query": "q"}'))
    base = ["ragexp.monitor", f"monitor.input={path}", "monitor.judge_sample=0", "tracker=none",
            f"hydra.run.dir={tmp_path / 'out'}", f"cache.dir={tmp_path / 'cache'}"]
    stopped = call_in(main, base, tmp_path)
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
    assert f"{path}:3: timestamp 99999999999999999999 is out of range" in stopped.stderr
    skipped = call_in(main, [*base, "monitor.on_error=skip"], tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    assert json.loads((tmp_path / "out" / "windows.json").read_text())["malformed_lines"] == 1


def outputs_lines(bad: bytes) -> bytes:
    good = [json.dumps({"id": f"q{i}", "question": f"question {i}?", "answer": f"answer {i}",
                        "contexts": [f"context {i}"]}).encode() for i in range(4)]
    good[1] = bad
    return b"\n".join(good) + b"\n"


OUTPUT_CASES = [(name, make(b'"id": "bad"'), reason) for name, make, reason in BAD]


@pytest.mark.parametrize("name,bad,reason", OUTPUT_CASES, ids=[c[0] for c in OUTPUT_CASES])
def test_recorded_outputs_count_and_skip_or_refuse_a_malformed_line(tmp_path, name, bad, reason):
    path = tmp_path / "outputs.jsonl"
    path.write_bytes(outputs_lines(bad.replace(b'"query"', b'"question"')))
    data = from_yaml("dataset/outputs", path=str(path), on_error="skip", max_field_bytes=CAP).load()
    assert [q.qid for q in data.questions] == ["q0", "q2", "q3"]
    [skipped] = data.skipped_rows
    assert skipped.startswith(f"{path}:2: ") and reason in skipped, skipped
    with pytest.raises(RagexpError, match=rf"^{path}:2: .*dataset.on_error=skip"):
        from_yaml("dataset/outputs", path=str(path), max_field_bytes=CAP).load()


def test_rows_given_in_memory_keep_the_same_rule():
    rows = [{"question": "fine?", "answer": "yes"}, {"question": "x \ud800", "answer": "a"},
            {"question": "long?", "answer": "x" * (CAP + 1)}]
    data = from_yaml("dataset/outputs", on_error="skip", max_field_bytes=CAP).with_rows(rows).load()
    assert len(data.questions) == 1 and len(data.skipped_rows) == 2
    assert "row 2: " in data.skipped_rows[0] and "lone surrogate" in data.skipped_rows[0]
    assert "row 3: answer: 1,001 bytes" in data.skipped_rows[1] and "dataset.max_field_bytes" in data.skipped_rows[1]


@pytest.mark.parametrize("field", ["answer", "contexts"])
def test_the_benchs_oversized_row_holds_the_bytes_asked_in_its_field_after_an_ordinary_row(tmp_path, field):
    """bench/input_caps.py writes its 50 MB rows in pieces; here at the tests' cap, and over two pieces."""
    sys.path.insert(0, str(ROOT / "bench"))
    from input_caps import recorded_outputs

    ordinary, over = recorded_outputs(tmp_path / "over.jsonl", field, CAP + 1).read_bytes().splitlines()
    assert json_record(ordinary, 1, CAP)["answer"] == "Port 7070."
    with pytest.raises(MalformedLine, match=f"^{field}: 1,001 bytes, over the cap of 1,000"):
        json_record(over, 2, CAP)
    _, long = recorded_outputs(tmp_path / "long.jsonl", field, 2_000_001).read_bytes().splitlines()
    value = json_record(long, 2, 2_000_001)[field]
    assert (value if field == "answer" else value[0]) == "x" * 2_000_001 and len(value) == (2_000_001 if field == "answer" else 1)
    assert recorded_outputs(tmp_path / "alone.jsonl", None, 0).read_bytes().splitlines() == [ordinary]


def test_the_cap_is_a_setting_of_ten_million_bytes():
    from hydra import compose as hydra_compose, initialize_config_dir

    assert compose("dataset=outputs").dataset.max_field_bytes == 10_000_000
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert hydra_compose(config_name="monitor").monitor.max_field_bytes == 10_000_000


def test_a_lone_surrogate_in_recorded_outputs_ends_the_run_as_input(tmp_path):
    """The whole command: a lone surrogate reached the cache key and crashed the run (exit 1), also
    with on_error=skip."""
    path = tmp_path / "outputs.jsonl"
    path.write_bytes(outputs_lines(b'{"id": "bad", "question": "x \\ud800", "answer": "a"}'))
    base = ["dataset=outputs", f"dataset.path={path}", "tracker=none", "cache.enabled=false"]
    stopped = run_app(*base, cwd=tmp_path)
    assert stopped.returncode == 2 and f"{path}:2: a lone surrogate" in stopped.stderr and "Traceback" not in stopped.stderr
    skipped = run_app(*base, "dataset.on_error=skip", cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stderr


def test_json_record_takes_what_python_takes_and_names_the_rest():
    assert json_record(b'{"score": NaN}', 2) is not None  # Python's json writes NaN: such files exist
    assert json_record(b"\xef\xbb\xbf{}", 1) == {}
    with pytest.raises(MalformedLine, match="not valid JSON"):
        json_record(b"\xef\xbb\xbf{}", 2)  # a byte-order mark opens a file, not a later line
    with pytest.raises(MalformedLine, match="expected a JSON object, got list"):
        json_record(b"[1]", 1)
    assert json_record(b'{"emoji": "\\ud83d\\ude00"}', 1) == {"emoji": "\U0001f600"}  # a whole pair is text


def test_a_csv_log_keeps_the_same_rule(tmp_path):
    """A CSV log: a byte-order mark is not part of the header, a field that is not UTF-8 or over the
    cap is a malformed line (they crashed the command, or stopped it also with on_error=skip)."""
    path = tmp_path / "log.csv"
    path.write_bytes(b"\xef\xbb\xbftimestamp,latency_ms,query\n2026-11-01T00:00:00Z,100,a\n"
                     b"2026-11-01T00:01:00Z,100,caf\xe9\n2026-11-01T00:02:00Z,100,%s\n"
                     b"2026-11-01T00:03:00Z,100,%s\n2026-11-01T00:04:00Z,100,b\n" % (b"x" * (CAP + 1), b"y" * 200_000))
    summary, malformed = read_log(path, "skip")
    assert summary.records == 2 and malformed.count == 3
    assert [e.split(": ", 1)[0] for e in malformed.examples] == [f"{path}:{n}" for n in (3, 4, 5)]
    assert "is not UTF-8" in malformed.examples[0] and "over the cap of 1,000" in malformed.examples[1]
    with pytest.raises(RagexpError, match=rf"^{path}:3: query: byte 0xe9 is not UTF-8"):
        read_log(path, "stop")
