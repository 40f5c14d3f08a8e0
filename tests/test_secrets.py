"""Secrets nowhere: credentials in a URL (given through an environment variable) are used to
connect and masked everywhere else; a key or a credentialed URL on the command line is refused
before anything is written. A run and a sweep against the local test server are grepped, every
file they wrote (Hydra folders, MLflow store and artifacts, caches, logs) and their output."""
import base64
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
    assert job.data.params["judge.endpoint.base_url"] == server.base_url.replace("http://", "http://***@")


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
