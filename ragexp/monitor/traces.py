"""`monitor.source=mlflow`: the traces of an MLflow experiment (those of `ragexp tracing=on`, or of
any application traced with MLflow) as the monitor's input. They are read a page at a time and
written as a JSONL log in the monitor's own record format (the default `monitor.columns`), which the
monitor then reads like any log, so it streams and samples the same way:

- timestamp: the trace's request time (ms); latency_ms: its duration (none for a run's light
  question record, whose times were not measured);
- query / answer: the root span's inputs and outputs (`question` / `answer` when they are dicts with
  them, else the whole value as text);
- contexts: the documents of its RETRIEVER spans (`page_content`, `metadata.doc_uri`, `metadata.score`);
- tokens_in / tokens_out: the trace's token usage; model: the first span's `mlflow.llm.model`;
- error: empty for an OK trace, else the root span's `ragexp.failure_reason` or its status message;
- feedback: the last HUMAN feedback assessment with a yes/no or numeric value (a 1-5 rating counts
  as satisfied from `monitor.feedback_satisfied_from` on);
- variant: the trace's tag `variant` (`mlflow.update_current_trace(tags={"variant": "B"})`), for an
  A/B test (`monitor.ab`)."""
from __future__ import annotations

import json
from pathlib import Path

from ragexp.errors import RagexpError
from ragexp.store.trace_store import LIGHT_TAG

PAGE = 200


def export_traces(experiment: str, tracking_uri: str | None, run_id: str | None, path: Path) -> tuple[Path, int]:
    """The traces of `experiment` (only those of run `run_id` when set) written to `path` as JSONL;
    returns the path and the number of traces."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri) if tracking_uri else mlflow.MlflowClient()
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise RagexpError(f"monitor.traces.experiment: no experiment {experiment!r} at {client.tracking_uri}; "
                          "set monitor.traces.experiment (and monitor.traces.tracking_uri)")
    filter_string = f"metadata.`mlflow.sourceRun` = '{run_id}'" if run_id else None
    path.parent.mkdir(parents=True, exist_ok=True)
    count, token = 0, None
    with path.open("w", encoding="utf-8") as out:
        while True:
            page = client.search_traces(locations=[found.experiment_id], filter_string=filter_string,
                                        max_results=PAGE, order_by=["timestamp_ms ASC"], page_token=token)
            for trace in page:
                out.write(json.dumps(record_of(trace), ensure_ascii=False, default=str) + "\n")
                count += 1
            token = page.token
            if not token:
                return path, count


def text_of(value, key: str) -> str | None:
    if isinstance(value, dict) and key in value:
        value = value[key]
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def record_of(trace) -> dict:
    """One trace as one record of the monitor's log format."""
    info, spans = trace.info, trace.data.spans
    root = next((s for s in spans if s.parent_id is None), None)
    contexts = []
    for span in spans:
        if span.span_type == "RETRIEVER" and isinstance(span.outputs, list):
            for doc in span.outputs:
                if isinstance(doc, dict):
                    meta = doc.get("metadata") or {}
                    contexts.append({"text": str(doc.get("page_content", "")), "doc_id": meta.get("doc_uri"),
                                     "score": meta.get("score")})
    usage = info.token_usage or {}
    model = next((s.attributes.get("mlflow.llm.model") for s in spans if s.attributes.get("mlflow.llm.model")), None)
    error = None
    if str(info.state) != "OK" and not str(info.state).endswith(".OK"):
        error = (root.attributes.get("ragexp.failure_reason") if root else None) or \
            (root.status.description if root else "") or "error"
    feedback = None
    for assessment in info.assessments or []:
        value = getattr(assessment, "value", None) if getattr(assessment, "feedback", None) is not None else None
        if assessment.source.source_type == "HUMAN" and isinstance(value, (bool, int, float)) and value == value:
            feedback = value  # yes/no, or a number on the feedback's scale (monitor.feedback_satisfied_from)
    return {"timestamp": info.request_time, "query": text_of(root.inputs if root else None, "question"),
            "contexts": contexts, "answer": text_of(root.outputs if root else None, "answer"),
            "latency_ms": None if info.tags.get(LIGHT_TAG) == "light" else info.execution_duration,
            "tokens_in": usage.get("input_tokens"),
            "tokens_out": usage.get("output_tokens"), "model": model, "error": error, "feedback": feedback,
            "variant": info.tags.get("variant"), "trace_id": info.trace_id}
