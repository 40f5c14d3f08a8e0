"""`python -m ragexp.monitor monitor.source=mlflow`: the traces a run made with tracing=on (a real
SQLite store, the LLM test server, one refused request) read as the monitor's input."""
import json

from conftest import TEST_KEY_ENV, call_in, llm_args, run_app


def test_monitor_reads_the_traces_of_a_traced_run(tmp_path, server):
    import mlflow

    from ragexp.monitor.__main__ import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    server.faults = [400]  # one question fails at its generator request: an error record
    args = [*llm_args(server), "dataset.limit=4", "tracing=on", "max_failed_share=1", "llm.cache_dir=null",
            f"tracker.tracking_uri={uri}", f"cache.dir={tmp_path / 'cache'}"]
    proc = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert proc.returncode == 0, proc.stderr
    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("ragexp")
    traces = client.search_traces(locations=[experiment.experiment_id])
    assert len(traces) == 4
    for trace, variant in zip(traces, "ABAB"):  # an A/B test's variant, as a trace tag
        client.set_trace_tag(trace.info.trace_id, "variant", variant)

    out = tmp_path / "monitor"
    done = call_in(main, ["ragexp.monitor", "monitor.source=mlflow", f"monitor.traces.tracking_uri={uri}",
                          "monitor.judge_sample=2", "embedder@scoring_embedder=hash", "tracker=none",
                          f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={out}"], tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "windows.json").read_text())
    assert summary["records"] == 4 and summary["malformed_lines"] == 0
    [window] = summary["windows"]
    metrics = window["metrics"]
    assert metrics["errors"] == 1 and metrics["error_rate"] == 0.25
    usages = [t.info.token_usage for t in traces]
    assert sum(u is None for u in usages) == 1  # the failed question made no request that answered
    assert metrics["tokens_in"] == sum(u["input_tokens"] for u in usages if u) > 0
    assert metrics["tokens_out"] == sum(u["output_tokens"] for u in usages if u) > 0
    records = [json.loads(line) for line in (out / "traces-input.jsonl").read_text().splitlines()]
    by_id = {t.info.trace_id: t for t in traces}
    for record in records:
        trace = by_id[record["trace_id"]]
        assert record["latency_ms"] == trace.info.execution_duration
        assert record["query"] == trace.data.spans[0].inputs["question"]
        assert len(record["contexts"]) == 5 and record["contexts"][0]["text"]
    assert sum(1 for r in records if r["error"] and "HTTP 400" in r["error"]) == 1
    assert sorted(r["variant"] for r in records) == ["A", "A", "B", "B"]
    assert "the records carry variants (A, B): monitor.ab.control=" in done.stdout
    judged = [json.loads(line) for line in (out / "judged.jsonl").read_text().splitlines()]
    assert len(judged) == 2 and all(j["judge"] == "offline-hash" and not j.get("failure") for j in judged)
