"""python -m ragexp.monitor end to end: a judged sample (offline judge, hash embedder; an LLM
judge on tests/openai_server.py), the MLflow layout read back from a sqlite store, alerts from a
degraded log against a baseline run, the webhook on a local HTTP server, exit statuses."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import CONF, TEST_KEY_ENV, call_in, free_port
from ragexp.monitor.alerts import post
from ragexp.monitor.app import monitor
from ragexp.monitor.synthetic import generate


def monitor_config(tmp_path, *overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        store = [] if "tracker=none" in overrides else [f"tracker.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
        return compose(config_name="monitor", overrides=[
            "embedder@scoring_embedder=hash", *store, f"cache.dir={tmp_path / 'cache'}", *overrides])


def client(tmp_path):
    import mlflow

    return mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """Two days of healthy traffic, and two days whose second day is degraded (3x slower, 20%
    errors, 30% satisfied, every answer about another question than its contexts)."""
    folder = tmp_path_factory.mktemp("logs")
    healthy = generate(folder / "healthy.jsonl", 400, span="2d", seed=1)
    degraded = generate(folder / "degraded.jsonl", 400, span="2d", seed=2, degrade_from="0.5", slower=3,
                        errors=0.2, satisfied=0.3, unrelated=1.0)
    return healthy, degraded


class Webhook:
    """A local HTTP server on 127.0.0.1 answering POSTs with scripted statuses (then 200)."""

    def __init__(self, statuses=()):
        self.statuses, self.bodies = list(statuses), []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/alerts"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def webhook():
    hooks = []

    def make(statuses=()):
        hooks.append(Webhook(statuses))
        return hooks[-1]

    yield make
    for hook in hooks:
        hook.close()


def test_windows_judged_and_logged_to_mlflow(tmp_path, logs, capsys):
    healthy, _ = logs
    out = tmp_path / "out"
    cfg = monitor_config(tmp_path, f"monitor.input={healthy}", "monitor.judge_sample=5", "monitor.name=healthy")
    assert monitor(cfg, out) == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "windows.json").read_text())
    assert summary["records"] == 400 and [w["window"] for w in summary["windows"]] == [
        "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"]
    for window in summary["windows"]:
        m = window["metrics"]
        assert m["judged_records"] == 5 and m["judge_failures"] == 0
        # answers copied from their contexts: fully supported; no expected answer: no answer_similarity
        assert m["avg_faithfulness"] == 10.0 and m["hallucination_rate"] == 0.0
        assert "avg_context_relevance" in m and "avg_answer_similarity" not in m
    judged = [json.loads(line) for line in (out / "judged.jsonl").read_text().splitlines()]
    assert len(judged) == 10 and all(j["judge"] == "offline-hash" and f"{healthy}:" in j["where"] for j in judged)
    for name in ("alerts.json", "report.md", "report.html", "monitor.png"):
        assert (out / name).stat().st_size > 0
    assert "2026-11-01T00:00:00Z" in printed and "no alert" in printed

    store = client(tmp_path)
    [experiment] = [e for e in store.search_experiments() if e.name == "ragexp-monitor"]
    runs = store.search_runs([experiment.experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "monitor"]
    children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda r: r.info.start_time)
    assert parent.info.run_name == "healthy" and parent.data.tags["judge"] == "offline-hash"
    assert [c.data.tags["window_start"] for c in children] == ["2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"]
    assert [c.info.start_time for c in children] == [w["start"] * 1000 for w in summary["windows"]]
    history = store.get_metric_history(parent.info.run_id, "latency_p95_ms")
    assert [(h.step, h.value) for h in history] == [(int(w["start"]), w["metrics"]["latency_p95_ms"])
                                                    for w in summary["windows"]]
    assert children[1].data.metrics["avg_faithfulness"] == 10.0
    assert {a.path for a in store.list_artifacts(parent.info.run_id)} >= {"alerts.json", "report.html", "monitor.png",
                                                                          "windows.json", "judged.jsonl"}


def test_degraded_log_alerts_against_a_baseline_window(tmp_path, logs, capsys, webhook):
    healthy, degraded = logs
    assert monitor(monitor_config(tmp_path, f"monitor.input={healthy}", "monitor.judge_sample=5",
                                  "monitor.name=healthy"), tmp_path / "baseline") == 0
    hook = webhook()
    out = tmp_path / "out"
    cfg = monitor_config(tmp_path, f"monitor.input={degraded}", "monitor.judge_sample=5",
                         "monitor.baseline=healthy 2026-11-01T00:00:00Z", "alerts.p95_latency.limit=2500",
                         f"monitor.webhook_url={hook.url}")
    assert monitor(cfg, out) == 3
    captured = capsys.readouterr()
    written = json.loads((out / "alerts.json").read_text())
    alerts = written["alerts"]
    assert written["baseline"]["name"] == "healthy 2026-11-01T00:00:00Z"
    assert {a["window"] for a in alerts} == {"2026-11-02T00:00:00Z"}  # the healthy first day fires nothing
    assert {a["rule"] for a in alerts} == {"faithfulness", "satisfaction", "error_rate", "p95_latency"}
    by_rule = {a["rule"]: a for a in alerts}
    f = by_rule["faithfulness"]
    assert f["baseline"] == 10.0 and f["current"] < 9.0 and f["change"] == pytest.approx((f["current"] - 10) / 10, abs=1e-4)
    assert by_rule["error_rate"]["severity"] == "CRITICAL" and by_rule["error_rate"]["current"] > 2 * by_rule["error_rate"]["baseline"]
    assert by_rule["p95_latency"]["baseline"] == 2500 and by_rule["p95_latency"]["baseline_run"] is None
    assert "answer_relevance" in captured.out  # skipped with a note: the offline judge gives no answer relevance
    assert captured.out.count("ALERT ") == 4 and "4 alert(s) fired" in captured.err
    assert hook.bodies == [written]  # the webhook got the alerts file's content
    assert "/alerts" not in json.dumps(client(tmp_path).get_run(written["mlflow_run"]).data.params)  # its URL is not logged

    store = client(tmp_path)
    run = store.get_run(by_rule["faithfulness"]["run_id"])
    assert run.data.tags["window_start"] == "2026-11-02T00:00:00Z" and run.data.tags["alerts"] == "4"
    assert run.data.tags["alert.faithfulness"].startswith("HIGH: avg_faithfulness")
    assert store.get_run(written["mlflow_run"]).data.tags["alerts"] == "4"


def test_failing_webhook_is_reported_and_keeps_the_alert_file(tmp_path, logs, capsys, webhook):
    _, degraded = logs
    hook = webhook([500] * 10)
    out = tmp_path / "out"
    cfg = monitor_config(tmp_path, f"monitor.input={degraded}", "monitor.judge_sample=0", "tracker=none",
                         "alerts.p95_latency.limit=2500", f"monitor.webhook_url={hook.url}",
                         "monitor.webhook_retries=2", "monitor.webhook_backoff_s=0.01")
    assert monitor(cfg, out) == 3
    err = capsys.readouterr().err
    host = hook.url.split("/alerts")[0]  # the URL's path is not shown: a webhook's path often holds its token
    assert f"webhook {host}/... failed after 3 attempt(s) (HTTP 500)" in err and str(out / "alerts.json") in err
    assert len(hook.bodies) == 3
    [alert] = json.loads((out / "alerts.json").read_text())["alerts"]  # without a baseline: the bound only
    assert alert["rule"] == "p95_latency" and alert["window"] == "2026-11-02T00:00:00Z"


def test_webhook_retries_then_delivers_and_gives_up_on_a_client_error(webhook):
    payload = {"alerts": [{"metric": "error_rate"}]}
    hook = webhook([503, 429])
    assert post(hook.url, payload, retries=3, backoff_s=0.01) == (True, 3, "")
    assert hook.bodies == [payload] * 3
    refused = webhook([404])
    assert post(refused.url, payload, retries=3, backoff_s=0.01) == (False, 1, "HTTP 404")
    delivered, attempts, error = post(f"http://127.0.0.1:{free_port()}/x", payload, retries=1, backoff_s=0.01)
    assert (delivered, attempts) == (False, 2) and error


def test_llm_judge_on_the_test_server_and_its_cache(tmp_path, logs, server, monkeypatch):
    healthy, _ = logs
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    overrides = [f"monitor.input={healthy}", "monitor.judge_sample=3", "tracker=none", "judge=llm",
                 f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}"]
    assert monitor(monitor_config(tmp_path, *overrides), tmp_path / "a") == 0
    assert len(server.chat_requests()) == 6  # 3 per window, one request each
    windows = json.loads((tmp_path / "a" / "windows.json").read_text())
    for window in windows["windows"]:  # the server's scripted scores: context relevance 8, faithfulness 9
        assert window["metrics"]["avg_faithfulness"] == 9.0 and window["metrics"]["avg_context_relevance"] == 8.0
        assert "avg_answer_similarity" not in window["metrics"]
    assert windows["judge_input_tokens"] > 0 and windows["llm_requests"] == 6
    sent = [json.dumps(r["body"]["messages"]) for r in server.chat_requests()]
    judged = [json.loads(line) for line in (tmp_path / "a" / "judged.jsonl").read_text().splitlines()]
    assert all(any(json.dumps(j["answer"])[1:-1] in body for body in sent) for j in judged)  # each record's answer was judged
    assert monitor(monitor_config(tmp_path, *overrides), tmp_path / "b") == 0
    assert len(server.chat_requests()) == 6  # the same sample again: answered from the caches


def test_cli_exit_status_and_malformed_line_message(tmp_path):
    """The Hydra entry point (`python -m ragexp.monitor`), run in this process by `call_in`."""
    from ragexp.monitor.__main__ import main

    log = generate(tmp_path / "log.jsonl", 50, span="1d", malformed=1)
    [bad_line] = [n for n, line in enumerate(log.read_text().splitlines(), start=1) if line.startswith("{this")]
    base = ["ragexp.monitor", f"monitor.input={log}", "monitor.judge_sample=0", "tracker=none",
            f"hydra.run.dir={tmp_path / 'out'}"]
    stopped = call_in(main, base, tmp_path)
    assert stopped.returncode == 2 and "Traceback" not in stopped.stderr
    assert f"ragexp.monitor: error: {log}:{bad_line}: not valid JSON" in stopped.stderr
    skipped = call_in(main, [*base, "monitor.on_error=skip", "alerts.p95_latency.limit=100"], tmp_path)
    assert skipped.returncode == 3, skipped.stderr
    assert f"1 malformed lines skipped (monitor.on_error=skip): {log}:{bad_line}: not valid JSON" in skipped.stdout
    assert "ALERT MEDIUM: latency_p95_ms" in skipped.stdout
    summary = json.loads((tmp_path / "out" / "windows.json").read_text())
    assert summary["records"] == 49 and summary["malformed_lines"] == 1
    assert call_in(main, [*base, "monitor.windw=1h"], tmp_path).returncode == 2  # Hydra's own errors: bad input too
    misplaced = call_in(main, [*base, "judge_sample=0"], tmp_path)  # a setting of monitor:, given at the top
    assert misplaced.returncode == 2
    assert ("ragexp.monitor: error: judge_sample is not a setting of this command; did you mean "
            "monitor.judge_sample? (`+judge_sample=...` would add a key that nothing reads") in misplaced.stderr
    secret = call_in(main, [*base, "+monitor.api_key=abc"], tmp_path)
    assert secret.returncode == 2 and "secrets are not given on the command line" in secret.stderr


def test_triad_judge_gives_answer_relevance_for_its_alert_rule(tmp_path, logs, server, monkeypatch):
    healthy, _ = logs
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    cfg = monitor_config(tmp_path, f"monitor.input={healthy}", "monitor.judge_sample=2", "tracker=none", "judge=triad",
                         f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}")
    assert monitor(cfg, tmp_path / "out") == 0
    assert len(server.chat_requests()) == 16  # 2 records x 2 windows x 4 steps
    for window in json.loads((tmp_path / "out" / "windows.json").read_text())["windows"]:
        m = window["metrics"]  # the server scripts answer relevance 4 of 5 and every claim supported
        assert m["avg_answer_relevance"] == 0.75 and m["avg_faithfulness"] == 1.0 and m["hallucination_rate"] == 0.0


def test_bad_settings_stop_before_the_log_is_read(tmp_path, logs):
    from ragexp.errors import RagexpError

    healthy, _ = logs
    with pytest.raises(RagexpError, match="monitor.input: not set"):
        monitor(monitor_config(tmp_path, "tracker=none"), tmp_path / "out")
    with pytest.raises(RagexpError, match="monitor.baseline: no run with id or name 'nope'"):
        monitor(monitor_config(tmp_path, f"monitor.input={healthy}", "monitor.baseline=nope"), tmp_path / "out")
    with pytest.raises(RagexpError, match="monitor.baseline reads an MLflow run: use tracker=mlflow"):
        monitor(monitor_config(tmp_path, f"monitor.input={healthy}", "monitor.baseline=x", "tracker=none"), tmp_path / "out")
    with pytest.raises(RagexpError, match="dry_run: not supported"):
        monitor(monitor_config(tmp_path, f"monitor.input={healthy}", "dry_run=true", "tracker=none"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_store_that_does_not_answer_is_an_error_not_a_missing_baseline(tmp_path, logs, monkeypatch, capsys):
    """Unreachable MLflow: a baseline run id cannot be looked up (status 4 from the command, not
    "no such run"); without a baseline the windows are judged and written, the alerts go out, and
    the command exits 4 because it could not log (as `python -m ragexp` does)."""
    from ragexp.errors import StoreUnreachable

    healthy, _ = logs
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    base = [f"monitor.input={healthy}", "monitor.judge_sample=2", f"tracker.tracking_uri={url}"]
    with pytest.raises(StoreUnreachable, match=f"cannot .*{url}"):  # not BAD_INPUT's RagexpError: exit 4
        monitor(monitor_config(tmp_path, *base, f"monitor.baseline={'a' * 32}"), tmp_path / "with-baseline")
    out = tmp_path / "out"
    assert monitor(monitor_config(tmp_path, *base), out) == 4
    err = capsys.readouterr().err
    assert "ragexp.monitor: error: MLflow logging failed" in err and f"the outputs are in {out}" in err
    assert json.loads((out / "alerts.json").read_text())["mlflow_run"] is None
    assert (out / "windows.json").exists() and (out / "report.md").exists()


@pytest.mark.process
def test_the_webhook_timeout_bounds_each_whole_attempt(server):
    """A webhook that answers a byte a second (status line and headers too) never lets one read wait
    long: `monitor.webhook_timeout_s` still ends each attempt by its deadline (it took 75 s at 3 s)."""
    import time

    server.faults, server.dribble_s = ["dribble", "dribble"], 1.0
    started = time.monotonic()
    delivered, attempts, error = post(server.base_url + "/answer", {"alerts": []}, retries=1, backoff_s=0.0, timeout_s=2)
    took = time.monotonic() - started
    assert not delivered and attempts == 2 and len(server.requests) == 2
    assert error == "no whole reply within 2 s (monitor.webhook_timeout_s)"
    assert took < 5.5, took
    server.faults, server.dribble_s = ["dribble"], 0.0005  # sent slowly but in time: delivered
    assert post(server.base_url + "/answer", {"alerts": []}, retries=0, timeout_s=5)[0]
