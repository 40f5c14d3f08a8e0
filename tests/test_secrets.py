"""Secrets nowhere: credentials in a URL (given through an environment variable) are used to
connect and masked everywhere else; a key or a credentialed URL on the command line is refused
before anything is written. A run and a sweep against the local test server are grepped, every
file they wrote (Hydra folders, MLflow store and artifacts, caches, logs) and their output."""
import base64
import json
import sys
from pathlib import Path

import pytest

from conftest import TEST_KEY_ENV, run_cli
from ragexp.base.redact import has_credentials, scrub_url
from ragexp.config.secrets import secret_in_override

PASSWORD = "pw-canary-5b1e77"
KEY = "sk-canary-91d2c4aa"  # the API key, from $RAGEXP_TEST_LLM_KEY


@pytest.mark.parametrize("override", [
    "judge.endpoint.base_url=http://user:pw@host:8000/v1",
    "embedder.base_url=https://token@proxy.example/v1",
    "tracker.tracking_uri=http://admin:secret@mlflow:5000",
    "+retriever.url=http://a:b@qdrant:6333",
    "judge.endpoint.api_key_env=sk-proj-0123456789abcdef",
    "generator.endpoint.api_key_env=not a name",
    "+judge.endpoint.api_key=anything",
    "run_name=ghp_0123456789abcdefghijkl",
    "+system.headers.Authorization=Bearer tok-canary-77",
    "system.headers.X-Api-Key=abc123canary",
    "system.headers.X-Auth-Token=abc123canary",
    "system.headers.Cookie=session=abc123canary",
    "system.headers.X-Trace=${oc.env:TOK}",
])
def test_overrides_that_carry_a_secret_are_refused_without_echoing_it(override):
    why = secret_in_override(override)
    assert why is not None and override.split("=", 1)[1] not in why


@pytest.mark.parametrize("override", [
    "judge.endpoint.base_url=http://127.0.0.1:8000/v1", "judge.endpoint.api_key_env=MY_KEY",
    "judge.endpoint.api_key_env=null", "judge.endpoint.base_url=${oc.env:JUDGE_URL}", "hydra.run.dir=/tmp/x",
    "dataset.path=/data/sk-folder", "tracker.tracking_uri=sqlite:///mlflow.db", "-m", "judge.endpoint.model=a,b",
    "system.headers.X-Tenant=team-a", "system.headers.Accept-Language=de",
    "system.headers_env.Authorization=Bearer $RAG_TOKEN",
])
def test_ordinary_overrides_pass(override):
    assert secret_in_override(override) is None


def test_scrub_url_masks_only_the_credentials():
    assert scrub_url("see http://user:key@host:8000/v1 and https://tok@h/x") == "see http://***@host:8000/v1 and https://***@h/x"
    assert scrub_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert has_credentials("http://u:p@h") and not has_credentials("mailto:me@example.org")


def test_a_secret_on_the_command_line_is_refused_before_anything_is_written(monkeypatch, tmp_path, capsys):
    from ragexp.__main__ import main

    monkeypatch.chdir(tmp_path)
    for override in (f"judge.endpoint.base_url=http://user:{PASSWORD}@127.0.0.1:9/v1", f"judge.endpoint.api_key_env={KEY}"):
        monkeypatch.setattr(sys, "argv", ["ragexp", "-m", override, "dataset.limit=2"])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert "nothing was written" in err and PASSWORD not in err and KEY not in err
    assert list(tmp_path.iterdir()) == []  # no outputs/, multirun/, .hydra, mlflow.db, cache


def written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.process
def test_credentials_in_urls_are_in_no_file_and_no_output(server, tmp_path):
    url = server.base_url.replace("http://", f"http://judge-user:{PASSWORD}@")
    env = {"RAGEXP_TEST_LLM_URL": url, TEST_KEY_ENV: KEY}
    args = ["retriever=bm25", "embedder=hash", "embedder@scoring_embedder=hash", "dataset.limit=3",
            "judge=llm", "judge.endpoint.base_url=${oc.env:RAGEXP_TEST_LLM_URL}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}",
            "generator=openai", "generator.endpoint.base_url=${oc.env:RAGEXP_TEST_LLM_URL}",
            f"generator.endpoint.api_key_env={TEST_KEY_ENV}"]
    run = run_cli(*args, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    sweep = run_cli("-m", *args, "judge.temperature=0,0.5", cwd=tmp_path, env=env)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    # the URL's credentials reach the endpoint (httpx sends them as HTTP Basic auth), and only there
    basic = "Basic " + base64.b64encode(f"judge-user:{PASSWORD}".encode()).decode()
    assert server.chat_requests() and all(r["auth"] == basic for r in server.chat_requests())

    files = written_files(tmp_path)
    places = {p.relative_to(tmp_path).parts[0] for p in files}
    assert {"outputs", "multirun", "mlflow.db", "mlruns", ".ragexp-cache"} <= places, places
    assert any(p.name == "config.yaml" and p.parent.name == ".hydra" for p in files)
    assert any(p.suffix == ".log" for p in files) and any(p.name == "responses.sqlite" for p in files)
    leaks = [str(p.relative_to(tmp_path)) for p in files
             if PASSWORD.encode() in p.read_bytes() or KEY.encode() in p.read_bytes()]
    assert leaks == []
    for proc in (run, sweep):
        assert PASSWORD not in proc.stdout + proc.stderr and KEY not in proc.stdout + proc.stderr

    from test_cli import mlflow_runs

    client, runs = mlflow_runs(tmp_path)
    assert len(runs) == 4  # the run, the sweep's parent and its two jobs
    for run_info in runs:
        for value in run_info.data.params.values():
            assert PASSWORD not in value
    job = next(r for r in runs if "judge.endpoint.base_url" in r.data.params)
    assert job.data.params["judge.endpoint.base_url"] == "${oc.env:RAGEXP_TEST_LLM_URL}"  # as given, never resolved


HEADER_TOKEN = "tok-canary-3f9a"


@pytest.mark.parametrize("door", ["command line", "evaluate", "config folder"])
def test_a_credential_in_a_header_is_refused_at_every_door_and_written_nowhere(door, tmp_path, monkeypatch):
    """`system.headers.Authorization=Bearer ...` (and X-Api-Key, Cookie, a value from ${oc.env:...}):
    refused with one line pointing to headers_env, through the command line, ragexp.evaluate's
    overrides and a YAML file under --config-dir; the token is in no file."""
    import ragexp
    from ragexp.errors import RagexpError

    from conftest import run_app

    monkeypatch.chdir(tmp_path)
    base = ["system=http", "system.url=http://127.0.0.1:9/answer", "dataset=outputs",
            f"dataset.path={Path(__file__).parents[1] / 'examples' / 'recorded_outputs.jsonl'}", "tracker=none"]
    header = f"system.headers.Authorization=Bearer {HEADER_TOKEN}"
    if door == "command line":
        proc = run_app(*base, header, cwd=tmp_path)
        assert proc.returncode == 2 and "headers_env.Authorization" in proc.stderr and HEADER_TOKEN not in proc.stderr
    elif door == "evaluate":
        with pytest.raises(RagexpError, match="headers_env.Authorization") as err:
            ragexp.evaluate(overrides=[*base, header], output_dir=tmp_path / "run")
        assert HEADER_TOKEN not in str(err.value)
    else:
        (tmp_path / "mine" / "experiment").mkdir(parents=True)
        (tmp_path / "mine" / "experiment" / "svc.yaml").write_text(
            f"# @package _global_\nsystem:\n  headers:\n    Authorization: Bearer {HEADER_TOKEN}\n")
        proc = run_app("--config-dir", str(tmp_path / "mine"), "+experiment=svc", *base, cwd=tmp_path)
        assert proc.returncode == 2 and "system.headers.Authorization" in proc.stderr
        assert "headers_env.Authorization" in proc.stderr and HEADER_TOKEN not in proc.stderr
    leaked = [p for p in written_files(tmp_path) if HEADER_TOKEN in p.read_text(errors="replace")
              and "mine" not in p.parts]
    assert leaked == []


def test_the_documented_headers_env_spelling_works_as_printed(tmp_path, monkeypatch):
    """`system.headers_env.Authorization='Bearer $RAG_TOKEN'`, as docs/get-started/own-system.md prints it (no `+`)."""
    from conftest import compose

    cfg = compose("system=http", "system.url=http://127.0.0.1:9/answer", "system.headers_env.Authorization=Bearer $RAG_TOKEN",
                  "system.headers.X-Tenant=team-a")
    assert cfg.system.headers_env.Authorization == "Bearer $RAG_TOKEN" and cfg.system.headers["X-Tenant"] == "team-a"


# --- secrets entered every way: refused on the command line and in config files, kept as ${oc.env:NAME} and
# masked wherever written (ragexp.base.redact)

URL_KEY, BODY_KEY, PARAM_VALUE, HEADER_VALUE = "urlkey-canary-4c1d", "bodykey-canary-8e2a", "param-canary-b7f3", "hdr-canary-2d9e"
SPANS_AUTH = "spans-canary-6a0c"  # the OTLP receiver's header (tracing=otlp), from $SPANS_AUTH
LITERAL = "literal-canary-61ac"
EXAMPLES = Path(__file__).parents[1] / "examples"


@pytest.mark.parametrize("override", [
    f"system.url='http://127.0.0.1:9/answer?api_key={LITERAL}'",
    f"system.url='http://127.0.0.1:9/answer?version=2&sig={LITERAL}'",
    f"system.body={{question: '{{question}}', api_key: {LITERAL}}}",
    f"system.body={{question: '{{question}}', auth: {{token: {LITERAL}}}}}",
    f"+system.params.access_token={LITERAL}",
    f"+system.params.secret=choice(a,{LITERAL})",
    f"+judge.endpoint.key={LITERAL}",  # a misspelt key: refused before Hydra could say it is unknown
    f"+judge.endpoint.apiKey={LITERAL}",
    f"system.headers_env.X-Api-Key=not a name {LITERAL}",
])
def test_a_literal_secret_on_the_command_line_is_refused_before_hydra_writes_anything(override, monkeypatch, tmp_path, capsys):
    from ragexp.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ragexp", "system=http", "system.url=http://127.0.0.1:9/answer", override])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err
    assert done.value.code == 2, err
    assert err.startswith("ragexp: error: ") and "nothing was written" in err and LITERAL not in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("override", [
    "system.url=${oc.env:SVC_URL}", "system.body={question: '{question}', api_key: '${oc.env:BODY_KEY}'}",
    "+system.params.access_token=${oc.env:TOKEN}", "system.url='http://127.0.0.1:9/answer?api_key=${oc.env:K}'",
    "system.url=http://127.0.0.1:9/answer?", "+system.params.max_tokens=256", "+system.params.tokenizer=bpe",
    "+system.params.key_field=id", "system.params.top_k=1,2", "system.headers_env.X-Api-Key=SVC_TOKEN",
    "+system.params.note='Why? See http://docs.example/x?page=2 first'",  # a URL inside text: masked where written
])
def test_a_secret_read_from_the_environment_and_ordinary_settings_pass(override):
    assert secret_in_override(override) is None


def security_page_names() -> list[str]:
    """The credential names docs/security.md lists (the backticked words of its 'Credential-named keys' line)."""
    text = (Path(__file__).parents[1] / "docs" / "security.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("Credential-named keys"))
    import re

    return re.findall(r"`([a-z]+)`", line)


def test_the_credential_names_are_the_ones_docs_security_lists():
    from ragexp.base.redact import CREDENTIAL_WORDS

    assert sorted(security_page_names()) == sorted(CREDENTIAL_WORDS)


@pytest.mark.parametrize("word", __import__("ragexp.base.redact", fromlist=["CREDENTIAL_WORDS"]).CREDENTIAL_WORDS)
def test_each_credential_name_is_masked_refused_and_kept_from_the_environment(word):
    from ragexp.base.redact import masked

    camel = "x" + word[0].upper() + word[1:]
    for key in (word, f"db_{word}", camel, f"X-{word.title()}"):
        assert masked({"params": {key: LITERAL}}) == {"params": {key: "***"}}, key
        assert masked({"body": {key: "${oc.env:S}"}}) == {"body": {key: "${oc.env:S}"}}
        assert secret_in_override(f"+system.params.{key}={LITERAL}") is not None, key
        assert secret_in_override(f"+system.params.{key}=${{oc.env:S}}") is None, key
    # not the last word, or a setting that names a variable: not a credential
    assert masked({f"{word}_count": 3, f"{word}_env": "NAME"}) == {f"{word}_count": 3, f"{word}_env": "NAME"}


def test_masked_data_keeps_what_is_not_secret():
    from ragexp.base.redact import masked

    given = {"url": f"http://u:{LITERAL}@h:1/a?api_key={LITERAL}&v=${{oc.env:V}}", "top_k": 3, "max_tokens": 256,
             "headers_env": {"Authorization": "Bearer $TOKEN"}, "api_key_env": "OPENAI_API_KEY", "token": None,
             "links": [f"see http://h/#/runs?view=x and http://h/q?k={LITERAL}"], "use_auth": True}
    assert masked(given) == {"url": "http://***@h:1/a?api_key=***&v=${oc.env:V}", "top_k": 3, "max_tokens": 256,
                             "headers_env": {"Authorization": "Bearer $TOKEN"}, "api_key_env": "OPENAI_API_KEY",
                             "token": None, "links": ["see http://h/#/runs?view=x and http://h/q?k=***"], "use_auth": True}


def test_the_written_config_keeps_every_value_from_the_environment_unresolved(monkeypatch):
    from omegaconf import OmegaConf

    from ragexp.base.redact import written_config

    monkeypatch.setenv("SVC_URL", f"http://127.0.0.1:9/a?api_key={URL_KEY}")
    monkeypatch.setenv("PARAM", PARAM_VALUE)
    cfg = OmegaConf.create({"system": {"url": "${oc.env:SVC_URL}", "params": {"region": "${oc.env:PARAM}", "top_k": 2},
                                       "name": "${.url}", "path": "${oc.env:PARAM}/x", "copy": "${system.params}",
                                       "token": LITERAL, "k": "${.params.top_k}"}})
    assert written_config(cfg) == {"system": {
        "url": "${oc.env:SVC_URL}", "params": {"region": "${oc.env:PARAM}", "top_k": 2}, "name": "${oc.env:SVC_URL}",
        "path": "${oc.env:PARAM}/x", "copy": {"region": "${oc.env:PARAM}", "top_k": 2}, "token": "***", "k": 2}}
    broken = OmegaConf.create({"a": "${nowhere}", "b": "${oc.env:PARAM}", "c": f"http://h/?k={LITERAL}"})
    assert written_config(broken) == {"a": "${nowhere}", "b": "${oc.env:PARAM}", "c": "http://h/?k=***"}


@pytest.mark.parametrize("setting", [
    f"  url: http://127.0.0.1:9/answer\n  body:\n    question: '{{question}}'\n    api_key: {LITERAL}\n",
    f"  url: http://127.0.0.1:9/answer?api_key={LITERAL}\n",
    f"  url: http://127.0.0.1:9/answer\n  params:\n    client_secret: {LITERAL}\n",
])
def test_a_secret_in_a_config_file_is_refused_before_hydra_copies_it(setting, tmp_path):
    from conftest import run_app

    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "svc.yaml").write_text(f"# @package _global_\nsystem:\n{setting}")
    proc = run_app("--config-dir", str(tmp_path / "mine"), "system=http", "+experiment=svc", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("ragexp: error: system.") and LITERAL not in proc.stderr
    leaked = [p for p in written_files(tmp_path) if LITERAL in p.read_text(errors="replace") and "mine" not in p.parts]
    assert leaked == []


class Recording(__import__("http.server").server.BaseHTTPRequestHandler):
    """A RAG service that records what it is sent (path with its query, headers, JSON body)."""

    def do_POST(self):  # noqa: N802
        import json

        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        self.server.seen.append({"path": self.path, "headers": dict(self.headers), "body": body})  # type: ignore[attr-defined]
        reply = json.dumps({"answer": "It listens on port 7070.",
                            "contexts": [{"doc_id": "installation", "text": "quarryd listens on port 7070."}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.mark.process
def test_secrets_entered_every_way_are_in_no_file_and_no_stream_of_a_run_and_a_sweep(server, tmp_path):
    """system=http against a recording service and judge=llm against the OpenAI test server, with
    spans sent to an OTLP receiver (tracing=otlp): a key in the service URL's query string, in its
    body and its params (each from ${oc.env:...}), in a header (headers_env), credentials in the
    judge's URL and its API key, the receiver's own header. Each reaches the service, the judge or
    the receiver; none is in any file of the run and the sweep (run folders, .hydra/, multirun.yaml,
    sweep.json, stage cache, LLM request cache, MLflow's sqlite store and artifacts, traces), in the
    spans received, nor in stdout and stderr; config.yaml and the MLflow params say ${oc.env:NAME}."""
    import threading
    from http.server import ThreadingHTTPServer

    from otlp_receiver import Receiver

    service = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    service.seen = []  # type: ignore[attr-defined]
    threading.Thread(target=service.serve_forever, daemon=True).start()
    receiver = Receiver().__enter__()
    secrets = [URL_KEY, BODY_KEY, PARAM_VALUE, HEADER_VALUE, PASSWORD, KEY, SPANS_AUTH]
    env = {"SVC_URL": f"http://127.0.0.1:{service.server_address[1]}/answer?api_key={URL_KEY}", "BODY_KEY": BODY_KEY,
           "PARAM_VALUE": PARAM_VALUE, "SVC_HEADER": HEADER_VALUE, TEST_KEY_ENV: KEY,
           "JUDGE_URL": server.base_url.replace("http://", f"http://judge-user:{PASSWORD}@"), "SPANS_AUTH": SPANS_AUTH}
    args = ["system=http", "system.url=${oc.env:SVC_URL}",
            "system.body={question: '{question}', top_k: '{params.top_k}', region: '{params.region}', api_key: '${oc.env:BODY_KEY}'}",
            "+system.params.region=${oc.env:PARAM_VALUE}", "system.headers_env.X-Api-Key=SVC_HEADER",
            "dataset=outputs", f"dataset.path={EXAMPLES / 'recorded_outputs.jsonl'}", "dataset.limit=3",
            "embedder@scoring_embedder=hash", "judge=llm", "judge.endpoint.base_url=${oc.env:JUDGE_URL}",
            f"judge.endpoint.api_key_env={TEST_KEY_ENV}", "judge.endpoint.backoff_s=0.01", "tracing=otlp",
            f"tracing.endpoint={receiver.url}", "tracing.headers_env.Authorization='Bearer $SPANS_AUTH'"]
    try:
        run = run_cli(*args, "+system.params.top_k=3", cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr[-3000:]
        sweep = run_cli("-m", *args, "+system.params.top_k=1,2", cwd=tmp_path, env=env)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
    finally:
        service.shutdown()
        receiver.__exit__()
    # each secret was used where it belongs
    seen = service.seen  # type: ignore[attr-defined]
    assert len(seen) == 9 and all(s["path"] == f"/answer?api_key={URL_KEY}" for s in seen)
    assert all(s["body"]["api_key"] == BODY_KEY and s["body"]["region"] == PARAM_VALUE for s in seen)
    assert all(s["headers"].get("X-Api-Key") == HEADER_VALUE for s in seen)
    basic = "Basic " + base64.b64encode(f"judge-user:{PASSWORD}".encode()).decode()
    assert server.chat_requests() and all(r["auth"] == basic for r in server.chat_requests())
    assert len(receiver.bodies) == 3 and {h["Authorization"] for h in receiver.headers} == {f"Bearer {SPANS_AUTH}"}
    assert [s for body in receiver.bodies for s in secrets if s.encode() in body] == []

    files = written_files(tmp_path)
    leaks = [(str(p.relative_to(tmp_path)), s) for p in files for s in secrets if s.encode() in p.read_bytes()]
    assert leaks == []
    names = {p.name for p in files}
    places = {p.relative_to(tmp_path).parts[0] for p in files}
    assert {"outputs", "multirun", "mlflow.db", "mlruns", ".ragexp-cache"} <= places, places
    assert {"config.yaml", "overrides.yaml", "hydra.yaml", "multirun.yaml", "sweep.json", "traces.jsonl",
            "ragexp.log", "responses.sqlite"} <= names, names
    assert any("answers" in p.parts for p in files if ".ragexp-cache" in p.parts)  # the system's answers, cached
    for proc in (run, sweep):
        assert [s for s in secrets if s in proc.stdout + proc.stderr] == []

    from conftest import mlflow_runs
    from ragexp.base.yaml_text import read_yaml

    [single] = tmp_path.glob("outputs/*/*/config.yaml")
    written = read_yaml(single.read_text())["system"]
    assert written["url"] == "${oc.env:SVC_URL}" and written["body"]["api_key"] == "${oc.env:BODY_KEY}"
    assert written["params"]["region"] == "${oc.env:PARAM_VALUE}"
    client, runs = mlflow_runs(tmp_path)
    jobs = [r for r in runs if "system.url" in r.data.params]
    assert len(jobs) == 3 and client.search_traces(locations=[runs[0].info.experiment_id])
    for job in jobs:
        assert job.data.params["system.url"] == "${oc.env:SVC_URL}"
        assert job.data.params["system.params.region"] == "${oc.env:PARAM_VALUE}"
        assert job.data.params["judge.endpoint.base_url"] == "${oc.env:JUDGE_URL}"
        # the options chosen (short params), a sweep job's rank, interval and verdict: read, and clean
        assert job.data.params["system"] == "http" and job.data.params["judge"] == "llm"
        shown = json.dumps([job.data.params, job.data.tags, job.data.metrics])
        assert [s for s in secrets if s in shown] == []
    sweep_jobs = [job for job in jobs if "mlflow.parentRunId" in job.data.tags]
    assert len(sweep_jobs) == 2 and all("ragexp.verdict" in j.data.tags and "leaderboard_rank" in j.data.metrics
                                        for j in sweep_jobs)


def test_every_log_line_names_urls_masked():
    import logging

    from ragexp.base.redact import MaskedLog

    handler = logging.StreamHandler(__import__("io").StringIO())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        MaskedLog.install()
        MaskedLog.install()
        assert sum(isinstance(f, MaskedLog) for f in handler.filters) == 1
        logging.getLogger("ragexp.anything").warning("cannot reach %s (%s)", f"http://u:{LITERAL}@h/a?key={LITERAL}", "refused")
        logging.getLogger("ragexp").warning("open http://h:5000/#/experiments/1/runs?workflowType=machine_learning")
        try:
            raise ConnectionError(f"http://h/a?key={LITERAL}")
        except ConnectionError:
            logging.getLogger("ragexp").exception("job failed")
    finally:
        root.removeHandler(handler)
    lines = handler.stream.getvalue().splitlines()
    assert lines[:3] == ["cannot reach http://***@h/a?key=*** (refused)",
                         "open http://h:5000/#/experiments/1/runs?workflowType=machine_learning", "job failed"]
    assert lines[-1] == "ConnectionError: http://h/a?key=***" and LITERAL not in "".join(lines)
