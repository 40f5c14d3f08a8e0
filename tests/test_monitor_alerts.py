"""ragexp.monitor's alert rules on hand-checked numbers, and sampled records as the pipeline's types."""
import json

import pytest

from ragexp.errors import RagexpError
from ragexp.monitor.alerts import evaluate, rules_from
from ragexp.monitor.judging import SampleJudge
from ragexp.monitor.records import Columns
from ragexp.config.build import from_yaml

DEFAULTS = {
    "faithfulness": {"metric": "avg_faithfulness", "rule": "drop", "limit": 0.10, "severity": "HIGH"},
    "error_rate": {"metric": "error_rate", "rule": "rise", "limit": 2.0, "floor": 0.01, "severity": "CRITICAL"},
    "p95_latency": {"metric": "latency_p95_ms", "rule": "above", "limit": 2000, "severity": "MEDIUM"},
    "volume": {"metric": "requests", "rule": "below", "limit": 10, "severity": "LOW"},
    "off": None,
}


def window(start, **metrics):
    return {"window": start, "window_end": "later", "metrics": metrics, "run_id": f"run-{start}"}


def test_each_rule_kind_fires_only_past_its_limit():
    baseline = {"run_id": "b" * 32, "name": "eval", "metrics": {"avg_faithfulness": 8.0, "error_rate": 0.02}}
    windows = [
        window("w1", avg_faithfulness=7.2, error_rate=0.04, latency_p95_ms=2000, requests=10),   # all exactly at the limit
        window("w2", avg_faithfulness=7.19, error_rate=0.0401, latency_p95_ms=2000.5, requests=9),  # all just past
    ]
    alerts, notes = evaluate(rules_from(DEFAULTS), windows, baseline)
    assert notes == []
    assert [(a["window"], a["rule"]) for a in alerts] == [
        ("w2", "error_rate"), ("w2", "faithfulness"), ("w2", "p95_latency"), ("w2", "volume")]  # by severity
    by_rule = {a["rule"]: a for a in alerts}
    assert by_rule["faithfulness"]["change"] == pytest.approx(-0.1012, abs=1e-4)
    assert by_rule["faithfulness"]["baseline_run"] == "b" * 32 and by_rule["faithfulness"]["run_id"] == "run-w2"
    assert by_rule["p95_latency"]["baseline"] == 2000 and by_rule["p95_latency"]["baseline_run"] is None


def test_rise_needs_the_floor_and_missing_metrics_are_noted():
    rules = rules_from(DEFAULTS)
    no_errors = {"run_id": "x", "name": "clean", "metrics": {"error_rate": 0.0}}
    alerts, notes = evaluate(rules, [window("w", error_rate=0.005, requests=100), window("v", error_rate=0.02, requests=100)],
                             no_errors)
    assert [(a["window"], a["rule"], a["change"]) for a in alerts] == [("v", "error_rate", None)]
    assert any("'faithfulness' skipped: baseline run 'clean' has no metric 'avg_faithfulness'" in n for n in notes)
    assert any("'p95_latency': 2 of 2 windows have no 'latency_p95_ms'" in n for n in notes)
    alerts, notes = evaluate(rules, [window("w", latency_p95_ms=3000)], None)
    assert [a["rule"] for a in alerts] == ["p95_latency"]
    assert notes[0].startswith("alert rules faithfulness, error_rate skipped: no baseline")


@pytest.mark.parametrize("spec, message", [
    ({"x": {"metric": "m", "rule": "up", "limit": 1}}, r"alerts.x: needs a metric and a rule"),
    ({"x": {"metric": "m", "rule": "drop", "limit": 10}}, r"alerts.x.limit: a drop is a share"),
    ({"x": {"metric": "m", "rule": "above", "limit": "high"}}, r"alerts.x.limit: a number"),
    ({"x": {"metric": "m", "rule": "above", "limit": 1, "severity": "urgent"}}, r"alerts.x.severity"),
    ({"x": {"metric": "m", "rule": "above", "limit": 1, "bound": 2}}, r"alerts.x: unknown key"),
])
def test_bad_rules_name_the_setting(spec, message):
    with pytest.raises(RagexpError, match=message):
        rules_from(spec)


def test_csv_and_jsonl_rows_give_query_contexts_answer():
    columns = Columns({"query": "q", "answer": "a"})
    header = ["timestamp", "q", "contexts", "a"]
    assert columns.content(["t", "why?", json.dumps(["one", "two"]), "because"], header) == ("why?", ["one", "two"], "because")
    assert columns.content(["t", "why?", "[not json", "x"], header) == ("why?", ["[not json"], "x")
    line = json.dumps({"q": "why?", "contexts": [{"text": "c"}], "a": "ok"}).encode()
    assert columns.content(line) == ("why?", [{"text": "c"}], "ok")
    assert Columns({"contexts": None}).content(json.dumps({"query": "q", "answer": "a"}).encode()) == ("q", [], "a")


def test_offline_judge_scores_a_sample_without_expected_answers(tmp_path):
    from ragexp.run.work import Work

    work = Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    with work.embeddings.building():
        judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), name="offline-hash")
    cache = work.cache
    sample = SampleJudge(judge, work, {"judge": "offline-hash"})
    context = "Backups run nightly at 02:00 UTC. Restores need the admin role."
    judged = sample.judge_all([
        ("log:1", "When do backups run?", [context], "Backups run nightly at 02:00 UTC."),  # copied: supported
        ("log:2", "When do backups run?", [context], "The moon is made of green cheese."),  # unsupported
        ("log:3", "When do backups run?", [context], ""),                                    # no answer: fails
        ("log:4", "When do backups run?", [{"content": context, "score": True}], "Nightly."),  # unreadable contexts
        ("log:5", "When do backups run?", [{"page_content": context, "source": "ops.md", "score": 0.5}],
         "Backups run nightly at 02:00 UTC."),                                               # a context object
    ])
    assert [j.failure for j in judged] == ["", "", "no answer in the record",
                                           "contexts: context 1: score must be a finite number, got True", ""]
    assert judged[4].judgement.scores == judged[0].judgement.scores
    assert judged[0].judgement.scores["faithfulness"] == 10.0 and judged[1].judgement.scores["faithfulness"] == 1.0
    scores = sample.window_scores(judged[:3])
    assert scores["judged_records"] == 2 and scores["judge_failures"] == 1
    assert scores["avg_faithfulness"] == 5.5 and scores["hallucination_rate"] == 0.5
    assert "avg_answer_similarity" not in scores and "avg_context_relevance" in scores
    assert cache.stats["judgements_computed"] == 3
    sample.judge_all([("log:9", "When do backups run?", [context], "Backups run nightly at 02:00 UTC.")])
    assert cache.stats["judgements_cached"] == 1  # the same record again: from the stage cache
