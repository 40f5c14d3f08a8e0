"""tracing=otlp: a run's traces sent as OTLP/HTTP protobuf to a receiver on 127.0.0.1 (a real HTTP
server in a thread of this process, answering as a collector does), then read back by the
monitor's OTLP reader: the records it makes are the run's questions, answers and contexts; the
judge's scores travel on the root span. An endpoint that refuses them, one without its header
variable, one of the wrong form: the run's fate and the spans' fate each said in one line."""
import json
from pathlib import Path

import pytest
from conftest import HASH, run_app
from otlp_receiver import Receiver

pytest.importorskip("opentelemetry.proto", reason="the otel extra (make install installs it)")

FAST = ("retriever=bm25", *HASH, "dataset.limit=4", "tracker=none")


def questions_of(folder: Path) -> dict[str, dict]:
    return {q["question_id"]: q for q in map(json.loads, (folder / "questions.jsonl").read_text().splitlines())}


def received_records(receiver: Receiver, tmp_path: Path) -> list[dict]:
    """The received spans as the monitor reads them (monitor.source=otlp), a record per trace."""
    from ragexp.monitor.columns import Malformed
    from ragexp.monitor.spans import export_spans

    read = export_spans([receiver.spans_file(tmp_path / "received.otlp")], {"format": "otlp-proto"}, Malformed("stop"),
                        tmp_path / "records.jsonl")
    assert read.left_out == 0
    return [json.loads(line) for line in read.path.read_text().splitlines()]


def root_attributes(receiver: Receiver) -> list[dict]:
    """Each received trace's root span's attributes, as plain values."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    roots = []
    for body in receiver.bodies:
        message = ExportTraceServiceRequest.FromString(body)
        for span in (s for r in message.resource_spans for scope in r.scope_spans for s in scope.spans):
            if not span.parent_span_id:
                roots.append({a["key"]: next(iter(a["value"].values())) for a in MessageToDict(span)["attributes"]})
    return roots


def test_a_runs_spans_arrive_and_read_back_as_its_questions(tmp_path):
    with Receiver() as receiver:
        proc = run_app(*FAST, "tracing=otlp", f"tracing.endpoint={receiver.url}", f"hydra.run.dir={tmp_path / 'out'}",
                       f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "questions sent to http://127.0.0.1:" in proc.stderr + proc.stdout
    assert all(h["Content-Type"] == "application/x-protobuf" for h in receiver.headers)
    questions = questions_of(tmp_path / "out")
    by_text = {q["question"]: q for q in questions.values()}
    records = received_records(receiver, tmp_path)
    assert len(records) == len(questions) == 4
    for record in records:
        row = by_text[record["query"]]
        assert record["answer"] == row["answer"]
        assert [c["text"] for c in record["contexts"]] == [c["text"] for c in row["context"]]
    for root in root_attributes(receiver):
        row = questions[root["ragexp.question_id"]]
        assert row["judge_scores"]
        assert {k.removeprefix("ragexp.score."): v for k, v in root.items() if k.startswith("ragexp.score.")} \
            == pytest.approx(row["judge_scores"])


def test_spans_are_sent_in_requests_of_at_most_batch_spans_and_a_question_is_never_split(tmp_path):
    with Receiver() as receiver:
        proc = run_app(*FAST, "tracing=otlp", f"tracing.endpoint={receiver.url}", "tracing.batch_spans=5",
                       f"hydra.run.dir={tmp_path / 'out'}", f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    seen: dict[bytes, int] = {}
    for body in receiver.bodies:
        message = ExportTraceServiceRequest.FromString(body)
        spans = [s for r in message.resource_spans for scope in r.scope_spans for s in scope.spans]
        traces = {s.trace_id for s in spans}
        assert len(spans) <= 5 or len(traces) == 1  # a question with more spans than the batch goes alone
        for trace_id in traces:
            assert trace_id not in seen
            seen[trace_id] = 1
    assert len(seen) == 4 and len(receiver.bodies) > 1


def test_an_endpoint_that_refuses_the_spans_leaves_the_run_whole_and_says_so(tmp_path):
    with Receiver(status=503) as receiver:
        proc = run_app(*FAST, "tracing=otlp", f"tracing.endpoint={receiver.url}", "tracing.retries=1",
                       "tracing.backoff_s=0", f"hydra.run.dir={tmp_path / 'out'}", f"cache.dir={tmp_path / 'cache'}",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in (proc.stderr + proc.stdout).splitlines() if "tracing: spans not sent" in line]
    assert len(said) == 1 and "HTTP 503, 2 attempts" in said[0] and "traces.jsonl" in said[0]
    assert len(receiver.bodies) == 2
    assert (tmp_path / "out" / "results.json").is_file() and (tmp_path / "out" / "traces.jsonl").is_file()


def test_a_header_read_from_the_environment_is_sent_and_never_written(tmp_path):
    secret = "Basic cGstbGYtc2VjcmV0LXRlc3Q6c2stbGYtMTIzNA=="
    with Receiver() as receiver:
        proc = run_app(*FAST, "tracing=otlp", f"tracing.endpoint={receiver.url}",
                       "tracing.headers_env.Authorization=OTLP_TEST_AUTH", f"hydra.run.dir={tmp_path / 'out'}",
                       f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path, env={"OTLP_TEST_AUTH": secret})
    assert proc.returncode == 0, proc.stderr
    assert {h["Authorization"] for h in receiver.headers} == {secret}
    assert secret not in proc.stdout + proc.stderr
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("override, says", [
    ("tracing.endpoint=127.0.0.1:6006", "tracing.endpoint: must be an http(s) URL"),
    ("tracing.headers_env.Authorization=OTLP_TEST_UNSET", "environment variable 'OTLP_TEST_UNSET' is not set"),
    ("tracing.headers.Authorization=Bearer-x", "put its value in an environment variable"),
])
def test_bad_tracing_settings_are_refused_before_any_work(tmp_path, override, says):
    proc = run_app(*FAST, "tracing=otlp", override, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_span_kinds_and_documents_follow_openinference():
    from ragexp.store.otlp_export import attributes_of

    retrieve = {"type": "RETRIEVER", "inputs": {"query": "where?"}, "attributes": {"ragexp.cache": "hit"},
                "outputs": [{"id": "c1", "page_content": "here", "metadata": {"score": 0.5, "rank": 1}}]}
    request = {"type": "CHAT_MODEL", "inputs": {"messages": [{"role": "user", "content": "hi"}]}, "outputs": "yes",
               "attributes": {"mlflow.llm.model": "m", "mlflow.chat.tokenUsage": {"input_tokens": 3, "output_tokens": 1,
                                                                                   "total_tokens": 4}}}
    judge = {"type": "EVALUATOR", "inputs": {"question": "q"}, "outputs": {"scores": {"faithfulness": 9}},
             "attributes": {}}
    assert attributes_of(retrieve) == {
        "openinference.span.kind": "RETRIEVER", "ragexp.cache": "hit", "input.value": "where?",
        "retrieval.documents.0.document.id": "c1", "retrieval.documents.0.document.content": "here",
        "retrieval.documents.0.document.score": 0.5, "retrieval.documents.0.document.metadata": '{"score": 0.5, "rank": 1}'}
    assert attributes_of(request) == {
        "openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "hi", "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "yes", "output.value": "yes", "llm.model_name": "m",
        "llm.token_count.prompt": 3, "llm.token_count.completion": 1, "llm.token_count.total": 4}
    assert attributes_of(judge)["openinference.span.kind"] == "EVALUATOR"
    assert json.loads(attributes_of(judge)["output.value"]) == {"scores": {"faithfulness": 9}}
