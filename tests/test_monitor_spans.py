"""`python -m ragexp.monitor monitor.source=otlp`: OpenTelemetry spans as the monitor's input.

The spans are made by the OpenTelemetry SDK with OpenInference attributes and sent by its OTLP/HTTP
exporter to a receiver on 127.0.0.1 started here; what the receiver got is written as the
Collector's file exporter writes it (OTLP/JSON lines with hex ids, OTLP/protobuf with 4-byte
big-endian length prefixes) and as Phoenix's spans table saved to JSONL and parquet. Each read
gives the records of the same traces written directly as the monitor's JSONL."""
import base64
import json
import struct

import pytest

from conftest import call_in
from otlp_receiver import Receiver
from ragexp.errors import RagexpError
from ragexp.monitor.columns import Malformed
from ragexp.monitor.spans import export_spans

T0 = 1_796_000_000_000_000_000  # 2026-11-30, in ns: every time below is whole milliseconds after it
MS = 1_000_000

# the traces: (root kind, question, contexts, answer, variant, feedback, error, model, tokens, start ms, duration ms)
TRACES = [
    dict(root="CHAIN", question="Which port does Quarry listen on?", answer="Port 7400.", variant="A", feedback=1,
         contexts=[{"text": "Quarry listens on port 7400.", "doc_id": "ports", "score": 0.9},
                   {"text": "It was written in Go.", "doc_id": "history", "score": 0.4}],
         model="gpt-4o-mini", tokens=(120, 8), start=0, duration=850),
    dict(root="CHAIN", question="Who maintains Quarry?", answer="The Quarry team.", variant="B", feedback=0,
         contexts=[], model="gpt-4o-mini", tokens=(60, 5), start=1_000, duration=420, json_io=True),
    dict(root="LLM", question="Is Quarry written in Rust?", answer="No, in Go.", variant="A", feedback=None,
         contexts=[], model="llama-3", tokens=(30, 4), start=2_000, duration=300),
    dict(root="CHAIN", question="How do I rotate tokens?", answer=None, variant="B", feedback=None, error="timeout",
         contexts=[{"text": "Run qry token rotate.", "doc_id": "tokens", "score": 0.7}], model=None, tokens=None,
         start=3_000, duration=5_000),
]


@pytest.fixture
def receiver():
    """An OTLP/HTTP endpoint that keeps each POST /v1/traces body (an ExportTraceServiceRequest)."""
    with Receiver() as server:
        yield server


def documents(prefix, contexts):
    return {f"{prefix}.{i}.document.{field}": value for i, c in enumerate(contexts)
            for field, value in (("content", c["text"]), ("id", c["doc_id"]), ("score", c["score"]))}


def send(receiver) -> list[dict]:
    """TRACES as spans through the SDK's OTLP/HTTP exporter; the monitor records they should make."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider(resource=Resource({"service.name": "rag-service"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url)))
    tracer = provider.get_tracer("rag")
    expected = []
    for t in TRACES:
        start, end = T0 + t["start"] * MS, T0 + (t["start"] + t["duration"]) * MS
        llm_attributes = {"openinference.span.kind": "LLM", "llm.input_messages.0.message.role": "system",
                          "llm.input_messages.0.message.content": "Answer from the context.",
                          "llm.input_messages.1.message.role": "user",
                          "llm.input_messages.1.message.content": t["question"]}
        if t["answer"] is not None:
            llm_attributes.update({"llm.output_messages.0.message.role": "assistant",
                                   "llm.output_messages.0.message.content": t["answer"]})
        if t["model"]:
            llm_attributes.update({"llm.model_name": t["model"], "llm.token_count.prompt": t["tokens"][0],
                                   "llm.token_count.completion": t["tokens"][1]})
        tags = {k: t[k] for k in ("variant", "feedback") if t[k] is not None}
        if t["root"] == "LLM":
            root = tracer.start_span("llm", start_time=start, attributes={**llm_attributes, **tags})
        else:
            question = json.dumps({"question": t["question"]}) if t.get("json_io") else t["question"]
            root = tracer.start_span("rag", start_time=start, attributes={
                "openinference.span.kind": "CHAIN", "input.value": question, **tags})
            inside = trace.set_span_in_context(root)
            if t["contexts"]:
                retriever = tracer.start_span("retrieve", context=inside, start_time=start + MS, attributes={
                    "openinference.span.kind": "RETRIEVER", "input.value": t["question"],
                    **documents("retrieval.documents", t["contexts"])})
                retriever.end(end_time=start + 20 * MS)
            if t["answer"] is not None:
                llm = tracer.start_span("generate", context=inside, start_time=start + 30 * MS, attributes=llm_attributes)
                llm.end(end_time=end - MS)
                answer = json.dumps({"answer": t["answer"]}) if t.get("json_io") else t["answer"]
                root.set_attribute("output.value", answer)
        if t.get("error"):
            root.set_attribute("error.type", t["error"])
            root.set_status(Status(StatusCode.ERROR, "the generator timed out"))
        root.end(end_time=end)
        expected.append({"timestamp": (T0 + t["start"] * MS) / 1e6, "query": t["question"], "contexts": t["contexts"],
                         "answer": t["answer"], "latency_ms": float(t["duration"]),
                         "tokens_in": t["tokens"][0] if t["tokens"] else None,
                         "tokens_out": t["tokens"][1] if t["tokens"] else None, "model": t["model"],
                         "error": t.get("error"), "feedback": t["feedback"], "variant": t["variant"],
                         "trace_id": format(root.get_span_context().trace_id, "032x")})
    provider.shutdown()
    return expected


def requests_of(receiver):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return [ExportTraceServiceRequest.FromString(body) for body in receiver.bodies]


def as_otlp_proto(receiver, path):
    """The received messages as the file exporter's `format: proto` writes them."""
    with path.open("wb") as out:
        for message in requests_of(receiver):
            data = message.SerializeToString()
            out.write(struct.pack(">I", len(data)) + data)
    return path


def hex_ids(node):
    """protobuf's JSON mapping writes ids as base64; OTLP/JSON (and the Collector) as hex."""
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hex_ids(v))
                for k, v in node.items()}
    return [hex_ids(v) for v in node] if isinstance(node, list) else node


def as_otlp_json(receiver, path):
    """The received messages as the file exporter's `format: json` writes them: one a line."""
    from google.protobuf.json_format import MessageToDict

    lines = [json.dumps(hex_ids(MessageToDict(m, use_integers_for_enums=True))) for m in requests_of(receiver)]
    path.write_text("\n".join(lines) + "\n")
    return path


def phoenix_rows(receiver) -> list[dict]:
    """The received spans as rows of Phoenix's spans table (get_spans_dataframe): context ids,
    kind, times, status, and `attributes.*` columns, lists of documents and messages as lists of
    objects (`{"document.content": ...}`), as Phoenix nests them."""
    import pandas as pd

    from ragexp.monitor.spans import any_value

    rows = []
    for message in requests_of(receiver):
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {kv.key: any_value(kv.value) for kv in span.attributes}
                    row = {"context.trace_id": span.trace_id.hex(), "context.span_id": span.span_id.hex(),
                           "parent_id": span.parent_span_id.hex() or None, "name": span.name,
                           "span_kind": attributes.get("openinference.span.kind", "UNKNOWN"),
                           "start_time": pd.Timestamp(span.start_time_unix_nano, unit="ns", tz="UTC"),
                           "end_time": pd.Timestamp(span.end_time_unix_nano, unit="ns", tz="UTC"),
                           "status_code": {0: "UNSET", 1: "OK", 2: "ERROR"}[span.status.code],
                           "status_message": span.status.message}
                    nested: dict = {}
                    for key, value in attributes.items():
                        for listed in ("retrieval.documents.", "llm.input_messages.", "llm.output_messages."):
                            if key.startswith(listed):
                                number, _, field = key[len(listed):].partition(".")
                                items = nested.setdefault(listed[:-1], {})
                                items.setdefault(int(number), {})[field] = value
                                break
                        else:
                            row[f"attributes.{key}"] = value
                    for name, items in nested.items():
                        row[f"attributes.{name}"] = [items[i] for i in sorted(items)]
                    rows.append(row)
    return rows


def as_phoenix(receiver, path):
    import pandas as pd

    frame = pd.DataFrame(phoenix_rows(receiver)).set_index("context.span_id")
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.reset_index().to_json(path, orient="records", lines=True)
    return path


WRITERS = {"otlp.jsonl": as_otlp_json, "otlp.pb": as_otlp_proto, "phoenix.jsonl": as_phoenix,
           "phoenix.parquet": as_phoenix}


def read(path, tmp_path, on_error="stop", **settings):
    malformed = Malformed(on_error)
    found = export_spans([path], settings, malformed, tmp_path / "records.jsonl")
    records = [json.loads(line) for line in found.path.read_text().splitlines()]
    return records, found, malformed


@pytest.mark.parametrize("name", list(WRITERS))
def test_spans_give_the_records_of_the_same_traces_written_as_jsonl(name, receiver, tmp_path):
    expected = send(receiver)
    assert len(receiver.bodies) == 8  # SimpleSpanProcessor: one request per span, children before their root
    path = WRITERS[name](receiver, tmp_path / name)
    records, found, malformed = read(path, tmp_path)
    assert found.spans == 8 and found.records == 4 and found.left_out == 0 and malformed.count == 0
    key = lambda r: r["trace_id"]  # noqa: E731
    assert sorted(records, key=key) == sorted(expected, key=key)


def test_the_monitor_reads_spans_as_it_reads_the_same_records_as_a_log(receiver, tmp_path):
    from ragexp.monitor.__main__ import main

    expected = send(receiver)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in expected))
    spans = as_otlp_proto(receiver, tmp_path / "spans.pb")
    summaries = []
    for name, source in (("from-spans", ["monitor.source=otlp", f"monitor.input={spans}"]),
                         ("from-log", [f"monitor.input={log}"])):
        out = tmp_path / name
        done = call_in(main, ["ragexp.monitor", *source, "monitor.judge_sample=0", "tracker=none",
                              "monitor.window=1h", f"hydra.run.dir={out}"], tmp_path)
        assert done.returncode == 0, done.stderr
        summaries.append(json.loads((out / "windows.json").read_text()))
    from_spans, from_log = ({k: v for k, v in s.items() if k not in ("input", "read_s", "read_cpu_s")} for s in summaries)
    assert from_spans == from_log and from_spans["records"] == 4
    [window] = from_spans["windows"]
    assert window["metrics"]["errors"] == 1 and window["metrics"]["tokens_in"] == 210


def test_the_specifications_example_is_read_and_its_span_without_a_root_is_named(tmp_path):
    """The OTLP specification's JSON example (examples/trace.json of opentelemetry-proto: upper-case
    hex ids, times as numbers, kind as a number) holds one span whose parent is elsewhere: no
    record is guessed from it; it is named, and counted with on_error=skip."""
    example = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
               "scopeSpans": [{"scope": {"name": "my.library", "version": "1.0.0"}, "spans": [
                   {"traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
                    "parentSpanId": "EEE19B7EC3C1B173", "name": "I'm a server span",
                    "startTimeUnixNano": 1544712660000000000, "endTimeUnixNano": 1544712661000000000, "kind": 2,
                    "attributes": [{"key": "my.span.attr", "value": {"stringValue": "some value"}}]}]}]}]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(example, indent=2) + "\n")  # over many lines, as the example is written
    with pytest.raises(RagexpError, match=r"trace 5b8efff798038103d269b633813fc60c: no root span"):
        read(path, tmp_path)
    records, found, malformed = read(path, tmp_path, on_error="skip")
    assert records == [] and found.spans == 1 and found.left_out == 1 and malformed.count == 1


def test_a_trace_without_an_answer_is_counted_and_named_never_guessed(receiver, tmp_path):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    send(receiver)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=receiver.url)))
    silent = provider.get_tracer("rag").start_span("rag", attributes={"openinference.span.kind": "CHAIN",
                                                                      "input.value": "Anyone there?"})
    silent.end()
    provider.shutdown()
    path = as_otlp_json(receiver, tmp_path / "spans.jsonl")
    trace_id = format(silent.get_span_context().trace_id, "032x")
    records, found, malformed = read(path, tmp_path, on_error="skip")
    assert found.records == 4 and found.left_out == 1 and malformed.count == 1
    assert malformed.examples == [f"{path}: trace {trace_id}: no answer: no output.value on its root span nor an "
                                  "LLM span's output (llm.output_messages, output.value)"]
    with pytest.raises(RagexpError, match=f"trace {trace_id}: no answer"):
        read(path, tmp_path)


def test_a_file_that_is_not_otlp_is_one_line_exit_2(tmp_path):
    from ragexp.monitor.__main__ import main

    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"timestamp": "2026-11-30T10:00:00Z", "query": "q", "answer": "a"}) + "\n")
    done = call_in(main, ["ragexp.monitor", "monitor.source=otlp", f"monitor.input={log}", "monitor.judge_sample=0",
                          "tracker=none", f"hydra.run.dir={tmp_path / 'out'}"], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"ragexp.monitor: error: {log}:1: not OTLP") and "monitor.otlp.format" in line
    garbage = tmp_path / "spans.pb"
    garbage.write_bytes(struct.pack(">I", 1000) + b"\x00" * 10)
    with pytest.raises(RagexpError, match=r"message 1: a message cut short"):
        read(garbage, tmp_path)
    no_input = call_in(main, ["ragexp.monitor", "monitor.source=otlp", "tracker=none",
                              f"hydra.run.dir={tmp_path / 'out2'}"], tmp_path)
    assert no_input.returncode == 2 and "monitor.input: not set" in no_input.stderr


def test_a_later_malformed_line_follows_on_error(receiver, tmp_path):
    send(receiver)
    path = as_otlp_json(receiver, tmp_path / "spans.jsonl")
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
                               *lines[3:]]) + "\n")
    records, found, malformed = read(path, tmp_path, on_error="skip")
    assert found.records == 4 and malformed.count == 1 and malformed.examples[0].startswith(f"{path}:line 4: ")
    with pytest.raises(RagexpError, match=r"spans.jsonl:line 4: "):
        read(path, tmp_path)


def test_the_reader_says_which_extra_to_install_when_opentelemetry_is_missing(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "opentelemetry.proto.trace.v1", None)  # as if the extra were not installed
    path = tmp_path / "spans.pb"
    path.write_bytes(b"\x00\x00\x00\x00")
    with pytest.raises(RagexpError, match=r"^monitor.source=otlp needs the OpenTelemetry packages: "
                                          r"pip install 'ragexp\[otel\]'$"):
        read(path, tmp_path)


def test_a_span_that_comes_after_its_trace_was_written_is_named(tmp_path):
    """A trace is written once `linger` spans followed its root; a span of it read later is left
    out by name, not added to another record nor dropped silently."""
    from ragexp.monitor.spans import Span, SpanReader, Traces

    def span(trace, span_id, parent=""):
        return Span(trace, span_id, parent, "CHAIN", 0, 1, {}, None)

    malformed = Malformed("skip")
    traces = Traces(SpanReader(tmp_path / "spans.jsonl", "otlp-json", malformed, ()), linger=2)
    assert list(traces.add([span("t1", "a1", "r1"), span("t1", "r1"), span("t2", "b1", "r2")])) == []
    [written] = list(traces.add([span("t2", "r2")]))  # two spans after t1's root
    assert [s.span_id for s in written] == ["a1", "r1"]
    assert list(traces.add([span("t1", "late", "r1")])) == [] and malformed.count == 1
    assert malformed.examples[0].startswith(f"{tmp_path / 'spans.jsonl'}: trace t1: span late arrived")
    assert [[s.span_id for s in t] for t in traces.finish()] == [["b1", "r2"]]


@pytest.mark.parametrize("bad, says", [
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "\xff\xfe"}]}]}]}', "is not UTF-8"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "\\ud800"}]}]}]}', "surrogate"),
    (b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
])
def test_a_line_of_bad_bytes_lone_surrogates_or_deep_nesting_is_malformed_and_a_bom_is_accepted(receiver, tmp_path, bad, says):
    """The malformed-line rule every reader of ragexp follows (ragexp.base.json_lines): counted and
    skipped with on_error=skip, one line naming file:line without it; never a crash."""
    send(receiver)
    path = as_otlp_json(receiver, tmp_path / "spans.jsonl")
    lines = path.read_bytes().splitlines()
    path.write_bytes(b"\n".join([b"\xef\xbb\xbf" + lines[0], *lines[1:3], bad, *lines[3:]]) + b"\n")
    records, found, malformed = read(path, tmp_path, on_error="skip")
    assert found.records == 4 and malformed.count == 1
    assert malformed.examples[0].startswith(f"{path}:line 4: ") and says in malformed.examples[0]
    with pytest.raises(RagexpError, match=r"spans.jsonl:line 4: "):
        read(path, tmp_path)
