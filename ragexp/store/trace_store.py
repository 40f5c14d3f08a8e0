"""A run's questions logged as MLflow traces of its run, so that MLflow's GenAI views (Evaluation
runs, the run's Traces tab) show every question with its scores and the judge's rationale.

With tracing=on (ragexp.store.tracing) the folder's `traces.jsonl` holds the full spans: root span
`question`, child spans `retrieve`, `generate`, `judge` and the LLM requests inside them. Without
it, each question gets a light record made from the folder's `questions.jsonl`: the root span and
one RETRIEVER span with the retrieved chunks (no times are measured: both last 0 ms from the run's
start). Either way the judge's scores and reasoning are feedback (source: the judge), the answer
metrics feedback (source: ragexp) and the expected answer an expectation. Each trace carries the
question's pairing id (its question_id) as MLflow's evaluation request id (tag `mlflow.eval.requestId`),
on which `mlflow.genai.compare_evaluations` pairs the traces of two runs.

The traces are written in one batch rather than through MLflow's live span exporter, which writes
each span and each assessment in its own transaction: on a SQL store every trace with its
assessments in one transaction (`start_traces`), elsewhere (an `mlflow server`) one `start_trace`
per trace; then one `log_spans` for every span. The trace ids are derived from the run id and the
question id."""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Collection

from ragexp.store.tracing import TRACES

log = logging.getLogger(__name__)
LIGHT_TAG = "ragexp.record"  # "light" on a trace whose times were not measured (no tracing=on)
LINK_BATCH = 100  # MlflowClient.link_traces_to_run takes at most 100 traces at once


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def log_traces(client, folder: Path, experiment_id: str, run_id: str, judge: str, retry=lambda call, *a: call(*a),
               light: bool = True, started: float | None = None, feedback: str = "main") -> list[str]:
    """The folder's questions logged as traces to the store of `client` (an MlflowClient) and linked
    to the run `run_id`, the feedback credited to `judge`; returns their trace ids. The full spans of
    traces.jsonl when the folder has it; else, with `light`, a light record per question (timed at
    `started`, time.time(), else now); else nothing. `retry(call, *args)` makes each write
    (ragexp.store.locked_retries.retry_locked). `feedback`: which scores each trace carries
    (`scores_on_traces`)."""
    folder = Path(folder)
    traced = (folder / TRACES).is_file()
    if not (traced or light) or not (folder / "questions.jsonl").is_file():
        return []
    from mlflow.tracing.client import TracingClient

    clock = time.perf_counter()
    questions = {q["question_id"]: q for q in read_jsonl(folder / "questions.jsonl")}
    at_ns = int((started or time.time()) * 1e9)
    records = read_jsonl(folder / TRACES) if traced else [light_record(q, at_ns) for q in questions.values()]
    only, answer_metrics = scores_on_traces(folder, feedback)
    infos, spans = [], []
    for record in records:
        question = {**questions.get(record["question_id"], {}), "judge": judge}
        info, trace_spans = trace_of(record, question, experiment_id, run_id, only, answer_metrics)
        infos.append(info)
        spans += trace_spans
    start_traces(infos, retry)
    if spans:
        retry(TracingClient().log_spans, experiment_id, spans)
    trace_ids = [info.trace_id for info in infos]
    for start in range(0, len(trace_ids), LINK_BATCH):
        client.link_traces_to_run(trace_ids[start : start + LINK_BATCH], run_id)
    log.info("%d %s logged to run %s in %.1fs", len(trace_ids), "traces" if traced else "question records",
             run_id, time.perf_counter() - clock)
    return trace_ids


def scores_on_traces(folder: Path, feedback: str) -> tuple[set[str] | None, bool]:
    """Which scores each question's trace carries as feedback (`tracker.feedback`), as (the judge's
    scores kept, None: all of them; whether the answer metrics too): `main`, the scores the run's
    overall_score weighs, and hallucination (its aggregates.json says which); `judge`, all the judge's
    and hallucination; `all`, also the answer metrics. MLflow's per-question table shows the first
    four feedback names in name order (MLflow 3.18): the main scores are all in view, where the
    judge's other scores and the answer metrics (abstention, claim_hallucination_rate, ...) would
    push them out."""
    if feedback != "main":
        return None, feedback == "all"
    path = folder / "aggregates.json"
    spec = json.loads(path.read_text())["aggregates"] if path.is_file() else []
    overall = next((a for a in spec if a.get("kind") == "overall" and not a.get("where")), None)
    return (set(overall["inputs"]) | {"hallucination"} if overall else None), False


def light_record(question: dict, at_ns: int) -> dict:
    """A question of questions.jsonl as a trace record without measured spans: its retrieved chunks
    as one RETRIEVER span (what MLflow's retrieval views and scorers read)."""
    documents = [{"id": c["chunk_id"], "page_content": c["text"],
                  "metadata": {"doc_uri": c["doc_id"], "chunk_id": c["chunk_id"], "rank": rank}}
                 for rank, c in enumerate(question.get("context") or [], start=1)]
    retrieve = {"id": 1, "name": "retrieve", "type": "RETRIEVER", "parent": None, "start_ns": at_ns, "end_ns": at_ns,
                "inputs": {"query": question["question"]}, "outputs": documents,
                "attributes": {}, "error": ""}
    return {"question_id": question["question_id"], "question": question["question"], "spans": [retrieve],
            "start_ns": at_ns, "end_ns": at_ns, "light": True}


def start_traces(infos: list, retry) -> None:
    """The traces' infos and assessments written to the current store: on a SQL store all in one
    transaction, made of the rows MLflow's own `start_trace` makes; elsewhere one `start_trace` each."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracing.client import TracingClient
    from mlflow.tracking._tracking_service.utils import _get_store

    store = _get_store()
    if isinstance(store, SqlAlchemyStore) and infos:
        retry(start_in_one_transaction, store, infos)
        return
    tracing = TracingClient()
    for info in infos:
        retry(tracing.start_trace, info)


def start_in_one_transaction(store, infos: list) -> None:
    """What SqlAlchemyStore.start_trace writes for a new trace (its info row, tags with the artifact
    location, metadata marked final, assessments, the rollup partitions to rebuild), for all of
    `infos` in one session: one commit instead of two per trace. tests/test_tracing.py checks that
    the traces read back equal those start_trace writes."""
    from mlflow.store.tracking.dbmodels.models import SqlAssessments, SqlTraceInfo, SqlTraceMetadata, SqlTraceTag
    from mlflow.store.tracking.utils.sql_trace_rollups import RollupFamily, enqueue_rollup_rebuild_partitions
    from mlflow.store.tracking.utils.trace_analytics import (PROMOTED_TRACE_METADATA_KEYS,
                                                             analytics_columns_from_metadata)
    from mlflow.tracing.constant import TraceMetadataKey, TraceTagKey

    experiments: dict[str, object] = {}
    rows: dict[type, list] = {SqlTraceInfo: [], SqlTraceTag: [], SqlTraceMetadata: [], SqlAssessments: []}
    for info in infos:
        if info.experiment_id not in experiments:
            experiments[info.experiment_id] = experiment = store.get_experiment(info.experiment_id)
            store._check_experiment_is_active(experiment)
        trace_id, metadata = info.trace_id, dict(info.trace_metadata.items())
        rows[SqlTraceInfo].append(SqlTraceInfo(
            request_id=trace_id, experiment_id=info.experiment_id, timestamp_ms=info.request_time,
            execution_time_ms=info.execution_duration, status=info.state.value, client_request_id=info.client_request_id,
            request_preview=info.request_preview, response_preview=info.response_preview,
            trace_name=info.tags.get(TraceTagKey.TRACE_NAME), **analytics_columns_from_metadata(metadata)))
        rows[SqlTraceTag] += [SqlTraceTag(request_id=trace_id, key=k, value=v) for k, v in info.tags.items()
                              if k != TraceTagKey.TRACE_NAME]
        rows[SqlTraceTag].append(store._get_trace_artifact_location_tag(experiments[info.experiment_id], trace_id))
        for key in PROMOTED_TRACE_METADATA_KEYS:
            metadata.pop(key, None)
        metadata[TraceMetadataKey.TRACE_INFO_FINALIZED] = "true"
        rows[SqlTraceMetadata] += [SqlTraceMetadata(request_id=trace_id, key=k, value=v) for k, v in sorted(metadata.items())]
        for assessment in info.assessments:
            row = SqlAssessments.from_mlflow_entity(assessment)
            row.trace_id, row.experiment_id, row.trace_timestamp_ms = trace_id, int(info.experiment_id), info.request_time
            rows[SqlAssessments].append(row)
    with store.ManagedSessionMaker(read_only=False) as session:
        for kind in (SqlTraceInfo, SqlTraceTag, SqlTraceMetadata, SqlAssessments):
            session.bulk_save_objects(rows[kind])
        by_experiment: dict[int, list[int]] = {}
        for info in infos:
            by_experiment.setdefault(int(info.experiment_id), []).append(info.request_time)
        enqueue_rollup_rebuild_partitions(session, [(family, experiment_id, times) for experiment_id, times in by_experiment.items()
                                                    for family in (RollupFamily.TRACE_METRIC, RollupFamily.ASSESSMENT)])


def trace_of(record: dict, question: dict, experiment_id: str, run_id: str, only: Collection[str] | None = None,
             answer_metrics: bool = False):
    """One traced question as an MLflow TraceInfo (with its assessments) and its Spans."""
    from mlflow.entities import TraceInfo, TraceLocation, TraceState
    from mlflow.tracing.constant import TraceMetadataKey, TraceTagKey

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
        tags={"mlflow.traceName": "question", "ragexp.question_id": record["question_id"],
              # the question's pairing id: mlflow.genai.compare_evaluations pairs two runs' traces on it
              TraceTagKey.EVAL_REQUEST_ID: record["question_id"], **({LIGHT_TAG: "light"} if record.get("light") else {})},
        assessments=assessments(question, trace_id, only, answer_metrics))
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


def assessments(question: dict, trace_id: str, only: Collection[str] | None = None, answer_metrics: bool = False) -> list:
    """The judge's scores (numbers, under the judge's names) with its reasoning, and `hallucination`
    (yes/no, or the share of the judge's repeats that found one) as feedback (source: the judge,
    LLM_JUDGE), those named in `only` when given; with `answer_metrics` the answer metrics too
    (source: ragexp, CODE); the expected answer as an expectation."""
    from mlflow.entities import AssessmentSource, Expectation, Feedback

    def number(value):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    out = []
    judge = AssessmentSource(source_type="LLM_JUDGE", source_id=question.get("judge") or "judge")
    for name, value in (question.get("judge_scores") or {}).items():
        if value is not None and (only is None or name in only):
            out.append(Feedback(name=name, value=number(value), rationale=question.get("reasoning") or None,
                                source=judge, trace_id=trace_id))
    if question.get("hallucination") is not None and (only is None or "hallucination" in only):
        out.append(Feedback(name="hallucination", value=number(question["hallucination"]), source=judge, trace_id=trace_id))
    metrics = AssessmentSource(source_type="CODE", source_id="ragexp")
    for name, value in (question.get("answer_metrics") or {}).items() if answer_metrics else ():
        if value is not None:
            out.append(Feedback(name=name, value=number(value), source=metrics, trace_id=trace_id))
    expected = question.get("expected_answers") or []
    if expected:
        dataset = AssessmentSource(source_type="HUMAN", source_id=question.get("source") or "dataset")
        out.append(Expectation(name="expected_response", value=expected[0] if len(expected) == 1 else expected,
                               source=dataset, trace_id=trace_id))
    return out
