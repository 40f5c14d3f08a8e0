"""A run folder's `traces.jsonl` (tracing=on, ragexp.store.tracing) logged as MLflow traces of its run:
one trace per traced question (root span `question`, child spans `retrieve`, `generate`, `judge`
and the LLM requests inside them), with the judge's scores and reasoning as feedback (source: the
judge) and the expected answer as an expectation, read from the folder's `questions.jsonl`.

The traces are written to the store in one batch (one `start_trace` per trace, carrying its
assessments, and one `log_spans` for every span) rather than through MLflow's live span exporter,
which writes each span and each assessment in its own transaction (about 10x slower on a SQLite
store). The trace ids are derived from the run id and the question id."""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from pathlib import Path

from ragexp.store.tracing import TRACES

log = logging.getLogger(__name__)
LINK_BATCH = 100  # MlflowClient.link_traces_to_run takes at most 100 traces at once


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def log_traces(client, folder: Path, experiment_id: str, run_id: str, judge: str, retry=lambda call, *a: call(*a)) -> list[str]:
    """The folder's traces logged to the store of `client` (an MlflowClient) and linked to the run
    `run_id`, the feedback credited to `judge`; returns their trace ids ([] when the folder has no
    traces.jsonl). `retry(call, *args)` makes each write (ragexp.store.trackers.retry_locked)."""
    folder = Path(folder)
    if not (folder / TRACES).is_file():
        return []
    from mlflow.tracing.client import TracingClient

    started = time.perf_counter()
    questions = {q["question_id"]: q for q in read_jsonl(folder / "questions.jsonl")}
    tracing = TracingClient()
    spans, trace_ids = [], []
    for record in read_jsonl(folder / TRACES):
        question = {**questions.get(record["question_id"], {}), "judge": judge}
        info, trace_spans = trace_of(record, question, experiment_id, run_id)
        retry(tracing.start_trace, info)
        spans += trace_spans
        trace_ids.append(info.trace_id)
    if spans:
        retry(tracing.log_spans, experiment_id, spans)
    for start in range(0, len(trace_ids), LINK_BATCH):
        client.link_traces_to_run(trace_ids[start : start + LINK_BATCH], run_id)
    log.info("%d traces logged to run %s in %.1fs", len(trace_ids), run_id, time.perf_counter() - started)
    return trace_ids


def trace_of(record: dict, question: dict, experiment_id: str, run_id: str):
    """One traced question as an MLflow TraceInfo (with its assessments) and its Spans."""
    from mlflow.entities import TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.constant import TraceMetadataKey

    seed = hashlib.sha256(f"{run_id}\0{record['question_id']}".encode()).digest()
    otel_trace_id = int.from_bytes(seed[:16], "big")
    trace_id = f"tr-{otel_trace_id:032x}"
    failure = question.get("failure_reason") or ""
    answer = question.get("answer")
    inputs, outputs = {"question": record["question"]}, {"answer": answer}
    root = {"id": 0, "name": "question", "type": "CHAIN", "parent": None, "start_ns": record["start_ns"],
            "end_ns": record["end_ns"], "inputs": inputs, "outputs": outputs, "error": failure,
            "attributes": {"ragexp.question_id": record["question_id"], "ragexp.status": question.get("status", "")}}
    spans = [span_of(s, trace_id, otel_trace_id, seed) for s in (root, *record["spans"])]
    info = TraceInfo(
        trace_id=trace_id, trace_location=TraceLocation.from_experiment_id(experiment_id),
        request_time=record["start_ns"] // 1_000_000, state=TraceState.ERROR if failure else TraceState.OK,
        request_preview=json.dumps(inputs)[:1000], response_preview=json.dumps(outputs)[:1000],
        execution_duration=(record["end_ns"] - record["start_ns"]) // 1_000_000,
        trace_metadata={TraceMetadataKey.SOURCE_RUN: run_id, **usage_of(record["spans"])},
        tags={"mlflow.traceName": "question", "ragexp.question_id": record["question_id"]},
        assessments=assessments(question, trace_id))
    return info, spans


def usage_of(spans: list[dict]) -> dict[str, str]:
    """The trace's tokens and cost, summed over its LLM requests, as MLflow's trace metadata."""
    from mlflow.tracing.constant import TraceMetadataKey

    requests = [s["attributes"] for s in spans if "mlflow.chat.tokenUsage" in s["attributes"]]
    if not requests:
        return {}
    usage = {k: sum(r["mlflow.chat.tokenUsage"][k] for r in requests)
             for k in ("input_tokens", "output_tokens", "total_tokens")}
    cost = sum(r.get("mlflow.llm.cost", {}).get("total_cost", 0.0) for r in requests)
    return {TraceMetadataKey.TOKEN_USAGE: json.dumps(usage), TraceMetadataKey.COST: json.dumps({"total_cost": cost})}


def span_of(span: dict, trace_id: str, otel_trace_id: int, seed: bytes):
    """A recorded span (ragexp.store.tracing) as an MLflow Span; its parent is the root unless it names one."""
    from mlflow.entities import Span
    from mlflow.tracing.constant import SpanAttributeKey

    def span_id(number: int) -> str:
        digest = hashlib.sha256(seed + number.to_bytes(4, "big")).digest()[:8]
        return base64.b64encode(digest).decode()

    parent = None if span["id"] == 0 else span_id(span["parent"] or 0)
    attributes = {key: json.dumps(value, default=str) for key, value in span["attributes"].items()}
    attributes.update({SpanAttributeKey.REQUEST_ID: json.dumps(trace_id),
                       SpanAttributeKey.SPAN_TYPE: json.dumps(span["type"]),
                       SpanAttributeKey.INPUTS: json.dumps(span["inputs"], default=str),
                       SpanAttributeKey.OUTPUTS: json.dumps(span["outputs"], default=str)})
    if span["error"]:
        attributes["ragexp.failure_reason"] = json.dumps(span["error"])
    return Span.from_dict({
        "trace_id": base64.b64encode(otel_trace_id.to_bytes(16, "big")).decode(), "span_id": span_id(span["id"]),
        "parent_span_id": parent, "name": span["name"], "start_time_unix_nano": span["start_ns"],
        "end_time_unix_nano": max(span["end_ns"], span["start_ns"]), "events": [], "attributes": attributes,
        "status": {"code": "STATUS_CODE_ERROR" if span["error"] else "STATUS_CODE_OK", "message": span["error"][:500]}})


def assessments(question: dict, trace_id: str) -> list:
    """The judge's scores and reasoning as feedback (source: the judge, LLM_JUDGE), the answer
    metrics as feedback (source: ragexp, CODE) and the expected answer as an expectation."""
    from mlflow.entities import AssessmentSource, Expectation, Feedback

    out = []
    judge = AssessmentSource(source_type="LLM_JUDGE", source_id=question.get("judge") or "judge")
    for name, value in (question.get("judge_scores") or {}).items():
        out.append(Feedback(name=name, value=value, rationale=question.get("reasoning") or None, source=judge,
                            trace_id=trace_id))
    if question.get("hallucination") is not None:
        out.append(Feedback(name="hallucination", value=question["hallucination"], source=judge, trace_id=trace_id))
    metrics = AssessmentSource(source_type="CODE", source_id="ragexp")
    for name, value in (question.get("answer_metrics") or {}).items():
        out.append(Feedback(name=name, value=value, source=metrics, trace_id=trace_id))
    expected = question.get("expected_answers") or []
    if expected:
        dataset = AssessmentSource(source_type="HUMAN", source_id=question.get("source") or "dataset")
        out.append(Expectation(name="expected_response", value=expected[0] if len(expected) == 1 else expected,
                               source=dataset, trace_id=trace_id))
    return out
