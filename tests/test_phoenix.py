"""tracing=otlp into a real Arize Phoenix on 127.0.0.1: Phoenix's own server (`phoenix serve`, from
its own venv, .venv-phoenix, which `make test-process` installs: Phoenix pins a web stack of its
own) takes the run's spans, and its REST API gives back each question with its contexts, its answer
and the judge's scores. Process tier: it starts a server and waits for it."""
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import HASH, run_app

pytestmark = pytest.mark.process
ROOT = Path(__file__).resolve().parents[1]
PHOENIX = ROOT / ".venv-phoenix" / "bin" / "phoenix"


@pytest.fixture
def phoenix() -> Path:
    """Phoenix's server command; a skip (a failure in CI) without it. Checked in the test, not at
    collection: the fast tier collects this file too, and must not count it as skipped."""
    if not PHOENIX.exists():
        pytest.skip(f"no Phoenix server: {PHOENIX} is made by `make test-process`")
    pytest.importorskip("opentelemetry.proto", reason="the otel extra (make install installs it)")
    return PHOENIX


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str):
    import httpx

    return httpx.get(url, timeout=10, trust_env=False)


def phoenix_spans(base: str, project: str, want: int, deadline_s: float = 60.0) -> list[dict]:
    """The project's spans once Phoenix has stored `want` of them (it ingests in the background)."""
    ends = time.monotonic() + deadline_s
    while True:
        reply = get(f"{base}/v1/projects/{project}/spans?limit=1000")
        spans = reply.json()["data"] if reply.status_code == 200 else []
        if len(spans) >= want or time.monotonic() > ends:
            return spans
        time.sleep(0.5)


def test_a_runs_questions_contexts_answers_and_scores_arrive_in_phoenix(phoenix, tmp_path):
    port, grpc = free_port(), free_port()
    env = {**os.environ, "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_PORT": str(port),
           "PHOENIX_GRPC_PORT": str(grpc), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false"}
    server = subprocess.Popen([str(phoenix), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        ends = time.monotonic() + 120
        while True:
            try:
                if get(f"{base}/healthz").status_code == 200:
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            assert server.poll() is None, server.stderr.read().decode()[-2000:] if server.stderr else ""
            assert time.monotonic() < ends, "Phoenix did not answer /healthz within 120 s"
            time.sleep(0.5)
        proc = run_app("retriever=bm25", *HASH, "dataset.limit=3", "tracker=none", "tracing=otlp",
                       f"tracing.endpoint={base}/v1/traces", "tracing.service_name=ragexp-test",
                       f"hydra.run.dir={tmp_path / 'out'}", f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        recorded = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
        want = sum(1 + len(r["spans"]) for r in recorded)
        spans = phoenix_spans(base, "ragexp-test", want)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(spans) == want
    questions = {q["question_id"]: q for q in map(json.loads, (tmp_path / "out" / "questions.jsonl").read_text().splitlines())}
    roots = [s for s in spans if s["name"] == "question"]
    assert len(roots) == len(questions) == 3
    for root in roots:
        attributes = root["attributes"]
        row = questions[attributes["ragexp.question_id"]]
        assert root["span_kind"] == "CHAIN" and root["parent_id"] is None
        assert attributes["input.value"] == row["question"] and attributes["output.value"] == row["answer"]
        assert row["judge_scores"] and {name: attributes[f"ragexp.score.{name}"] for name in row["judge_scores"]} \
            == pytest.approx(row["judge_scores"])
        [retrieve] = [s for s in spans if s["name"] == "retrieve" and s["context"]["trace_id"] == root["context"]["trace_id"]]
        assert retrieve["span_kind"] == "RETRIEVER" and retrieve["parent_id"] == root["context"]["span_id"]
        contents = [retrieve["attributes"].get(f"retrieval.documents.{n}.document.content") for n in range(len(row["context"]))]
        assert contents == [c["text"] for c in row["context"]]
