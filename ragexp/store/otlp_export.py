"""`tracing=otlp`: a run's traces sent as OpenTelemetry spans (OTLP over HTTP, protobuf) to a
collector, Arize Phoenix, Langfuse or any OTLP endpoint, once the run's folder is written.

The spans are those of `tracing=on` (ragexp.store.tracing: the folder's `traces.jsonl`), under a
root span `question` per traced question, with OpenInference's attributes, which Phoenix and
Langfuse show and `monitor.source=otlp` reads back (ragexp.monitor.spans):
- the root (CHAIN): `input.value` the question, `output.value` the answer, the judge's scores as
  `ragexp.score.NAME`, `ragexp.hallucination`, the answer metrics as `ragexp.metric.NAME`, the
  expected answer, the question id and the run's name; status ERROR with the failure reason;
- `retrieve` (RETRIEVER) and `rerank` (RERANKER): their documents
  (`retrieval.documents.N.document.id/content/score`, `reranker.output_documents.N...`);
- each LLM request (LLM): `llm.input_messages.N.message.role/content`, the reply as
  `llm.output_messages.0.message.content`, `llm.model_name`, `llm.token_count.*`;
- `judge` (EVALUATOR), `generate` and `system` (CHAIN): their inputs and outputs as JSON.

Trace and span ids are derived from the run folder and the question id: sending a folder again
sends the same ids. Headers come from the environment (`headers_env`), never from the config.
An endpoint that refuses the spans does not fail the run: one line says what was not sent and
that the spans stay in `traces.jsonl`."""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ragexp.base.redact import credential_header, environment_headers, scrub_url
from ragexp.base.settings import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from ragexp.errors import RagexpError
from ragexp.store.tracing import TRACES, Tracing

log = logging.getLogger(__name__)
EXTRA = "ragexp[otel]"
KINDS = {"CHAT_MODEL": "LLM", "LLM": "LLM", "RETRIEVER": "RETRIEVER", "RERANKER": "RERANKER",
         "EVALUATOR": "EVALUATOR", "EMBEDDING": "EMBEDDING"}  # a recorded span's type -> OpenInference's kind (else CHAIN)
REPLY_BYTES = 1_000_000  # a collector's answer is read, not used


class OtlpTracing(Tracing):
    """`tracing=otlp`: traces recorded as with tracing=on, then sent to `endpoint` (OTLP/HTTP,
    protobuf) in requests of at most `batch_spans` spans, each attempt within `timeout_s`, retried
    `retries` times. `headers_env` maps a header to the NAME of the environment variable holding its
    value (`Authorization: "Basic $LANGFUSE_AUTH"`); `headers` are sent as they are (no credentials
    there: they are refused). `service_name` is the resource's `service.name` and its OpenInference
project (Phoenix's project)."""

    def __init__(self, endpoint: str, enabled: bool, sample_rate: Fraction, seed: int, headers: Mapping[str, str],
                 headers_env: Mapping[str, str], timeout_s: PositiveFloat, retries: NonNegativeInt,
                 backoff_s: NonNegativeFloat, batch_spans: PositiveInt, service_name: str):
        super().__init__(enabled, sample_rate, seed)
        self.endpoint, self.headers, self.headers_env = str(endpoint), dict(headers or {}), dict(headers_env or {})
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.batch_spans, self.service_name = int(batch_spans), str(service_name)

    @classmethod
    def constraints(cls, endpoint: str | None = None, headers: Mapping | None = None,
                    headers_env: Mapping | None = None, **_) -> list[str]:
        """The endpoint's form, no credential in `headers`, and the OpenTelemetry packages installed:
        checked with the config, before any work."""
        problems = []
        parts = urlsplit(str(endpoint or ""))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"endpoint: must be an http(s) URL such as http://127.0.0.1:6006/v1/traces, got {endpoint!r}")
        problems += [why for header, value in (headers or {}).items() if (why := credential_header(str(header), value))]
        try:
            environment_headers(dict(headers_env or {}), "headers_env")
        except RagexpError as err:
            problems.append(str(err))
        try:
            from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: F401
        except ImportError:
            problems.append(f"tracing=otlp needs the OpenTelemetry packages: pip install '{EXTRA}'")
        return problems

    def send(self, folder: Path, run_name: str) -> tuple[bool, str] | None:
        """The folder's traces sent to the endpoint: whether they all were, and the line that says so."""
        folder = Path(folder)
        if not (folder / TRACES).is_file():
            return None
        from ragexp.base.http_deadline import post

        where = scrub_url(self.endpoint)
        headers = {"Content-Type": "application/x-protobuf", "User-Agent": "ragexp", **self.headers,
                   **environment_headers(self.headers_env, "tracing.headers_env")}
        questions = spans = 0
        for request, count, traces in requests_of(folder, run_name, self.service_name, self.batch_spans):
            delivered, attempts, error = post(self.endpoint, request, headers, self.retries, self.backoff_s,
                                              self.timeout_s, REPLY_BYTES, "tracing.timeout_s")
            if not delivered:
                before = f"the spans of {questions} questions were sent before; " if questions else ""
                return False, (f"tracing: spans not sent to {where} ({error}, {attempts} attempt{'s' * (attempts > 1)}); "
                        f"{before}every span stays in {folder / TRACES}")
            questions, spans = questions + traces, spans + count
        return True, f"tracing: {spans} spans of {questions} questions sent to {where}"


def read_jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def requests_of(folder: Path, run_name: str, service_name: str, batch_spans: int) -> Iterator[tuple[bytes, int, int]]:
    """The folder's traces as serialized ExportTraceServiceRequests of at most `batch_spans` spans
    (a trace is never split), each with its span and question counts."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    questions = {q["question_id"]: q for q in read_jsonl(folder / "questions.jsonl")} \
        if (folder / "questions.jsonl").is_file() else {}
    seed = str(folder.resolve())
    batch: list = []
    count = 0

    def request() -> bytes:
        message = ExportTraceServiceRequest()
        resource = message.resource_spans.add()
        set_attributes(resource.resource.attributes, {"service.name": service_name, "openinference.project.name": service_name,
                                                      "ragexp.run_name": run_name})
        scope = resource.scope_spans.add()
        scope.scope.name = "ragexp"
        for trace in batch:
            scope.spans.extend(trace)
        return message.SerializeToString()

    for record in read_jsonl(folder / TRACES):
        trace = spans_of(record, questions.get(record["question_id"], {}), seed, run_name)
        if batch and count + len(trace) > batch_spans:
            yield request(), count, len(batch)
            batch, count = [], 0
        batch.append(trace)
        count += len(trace)
    if batch:
        yield request(), count, len(batch)


def ids(seed: str, question_id: str) -> tuple[bytes, Any]:
    """The trace id of a question and the function giving its spans' ids (by recorded span number)."""
    digest = hashlib.sha256(f"{seed}\0{question_id}".encode()).digest()

    def span_id(number: int) -> bytes:
        return hashlib.sha256(digest + number.to_bytes(4, "big")).digest()[:8]
    return digest[:16], span_id


def spans_of(record: dict, question: dict, seed: str, run_name: str) -> list:
    """One traced question (a record of traces.jsonl, its row of questions.jsonl) as OTLP spans:
    the root `question`, then the recorded spans."""
    trace_id, span_id = ids(seed, record["question_id"])
    failure = question.get("failure_reason") or ""
    root_attributes: dict[str, Any] = {
        "openinference.span.kind": "CHAIN", "input.value": record["question"], "ragexp.question_id": record["question_id"],
        "ragexp.run_name": run_name, "ragexp.status": question.get("status", "")}
    if question.get("answer") is not None:
        root_attributes["output.value"] = question["answer"]
    for name, value in (question.get("judge_scores") or {}).items():
        root_attributes[f"ragexp.score.{name}"] = value
    if question.get("hallucination") is not None:
        root_attributes["ragexp.hallucination"] = bool(question["hallucination"])
    for name, value in (question.get("answer_metrics") or {}).items():
        root_attributes[f"ragexp.metric.{name}"] = value
    if question.get("reasoning"):
        root_attributes["ragexp.reasoning"] = question["reasoning"]
    expected = question.get("expected_answers") or []
    if expected:
        root_attributes["ragexp.expected_answer"] = expected[0] if len(expected) == 1 else json.dumps(expected)
    root = {"id": 0, "name": "question", "parent": None, "start_ns": record["start_ns"], "end_ns": record["end_ns"],
            "error": failure}
    out = [span_message(root, root_attributes, trace_id, span_id)]
    for span in record["spans"]:
        out.append(span_message(span, attributes_of(span), trace_id, span_id))
    return out


def span_message(span: dict, attributes: dict, trace_id: bytes, span_id) -> Any:
    from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

    message = Span(trace_id=trace_id, span_id=span_id(span["id"]), name=span["name"], kind=Span.SPAN_KIND_INTERNAL,
                   start_time_unix_nano=span["start_ns"], end_time_unix_nano=max(span["end_ns"], span["start_ns"]))
    if span["id"] != 0:
        message.parent_span_id = span_id(span["parent"] or 0)
    set_attributes(message.attributes, attributes)
    if span["error"]:
        message.status.code, message.status.message = Status.STATUS_CODE_ERROR, str(span["error"])[:1000]
    else:
        message.status.code = Status.STATUS_CODE_OK
    return message


def attributes_of(span: dict) -> dict[str, Any]:
    """A recorded span's OpenInference attributes (and its own `ragexp.*` ones)."""
    kind = KINDS.get(span["type"], "CHAIN")
    recorded = span["attributes"]
    out: dict[str, Any] = {"openinference.span.kind": kind}
    out.update({key: value for key, value in recorded.items() if key.startswith("ragexp.")})
    inputs, outputs = span["inputs"], span["outputs"]
    if kind == "LLM":
        for n, message in enumerate((inputs or {}).get("messages", [])):
            out[f"llm.input_messages.{n}.message.role"] = message["role"]
            out[f"llm.input_messages.{n}.message.content"] = message["content"]
        if outputs is not None:
            out["llm.output_messages.0.message.role"] = "assistant"
            out["llm.output_messages.0.message.content"] = str(outputs)
            out["output.value"] = str(outputs)
        if recorded.get("mlflow.llm.model"):
            out["llm.model_name"] = recorded["mlflow.llm.model"]
        usage = recorded.get("mlflow.chat.tokenUsage") or {}
        for ours, theirs in (("input_tokens", "prompt"), ("output_tokens", "completion"), ("total_tokens", "total")):
            if ours in usage:
                out[f"llm.token_count.{theirs}"] = usage[ours]
        return out
    query = (inputs or {}).get("query") if isinstance(inputs, dict) else None
    out["input.value"] = query if isinstance(query, str) else json.dumps(inputs, default=str)
    if kind in ("RETRIEVER", "RERANKER") and isinstance(outputs, list):
        prefix = "retrieval.documents" if kind == "RETRIEVER" else "reranker.output_documents"
        for n, document in enumerate(outputs):
            metadata = document.get("metadata") or {}
            out[f"{prefix}.{n}.document.id"] = str(document.get("id", ""))
            out[f"{prefix}.{n}.document.content"] = str(document.get("page_content", ""))
            if metadata.get("score") is not None:
                out[f"{prefix}.{n}.document.score"] = float(metadata["score"])
            out[f"{prefix}.{n}.document.metadata"] = json.dumps(metadata, default=str)
    elif outputs is not None:
        out["output.value"] = outputs if isinstance(outputs, str) else json.dumps(outputs, default=str)
    return out


def set_attributes(into, attributes: Mapping[str, Any]) -> None:
    """`attributes` added to a repeated KeyValue field: booleans, integers, floats and strings as
    such, anything else as JSON text; None left out."""
    for key, value in attributes.items():
        if value is None:
            continue
        item = into.add()
        item.key = key
        if isinstance(value, bool):
            item.value.bool_value = value
        elif isinstance(value, int):
            item.value.int_value = value
        elif isinstance(value, float):
            item.value.double_value = value
        elif isinstance(value, str):
            item.value.string_value = value
        else:
            item.value.string_value = json.dumps(value, default=str)
