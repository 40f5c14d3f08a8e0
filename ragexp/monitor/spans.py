"""`monitor.source=otlp`: OpenTelemetry spans as the monitor's input. The spans are read a message
(or a table's batch of rows) at a time, gathered into traces, and each trace is written as one
record of the monitor's own JSONL format (the default `monitor.columns`), which the monitor then
reads like any log (as `monitor.source=mlflow` does with MLflow's traces).

Formats (`monitor.otlp.format`; `auto` tells them by suffix and content):
- `otlp-json`: JSON lines of `TracesData` (`{"resourceSpans": [...]}`), as the OpenTelemetry
  Collector's file exporter writes them (`format: json`), or one `TracesData` over many lines (as
  the specification's example is written). Trace and span ids are hex there (not
  base64 as protobuf's JSON mapping has it for bytes), so they are turned into bytes before
  `google.protobuf.json_format` reads the line into `opentelemetry-proto`'s message.
- `otlp-proto`: the file exporter's `format: proto`: each `TracesData` (an
  `ExportTraceServiceRequest`, the same message on the wire) preceded by its length, 4 bytes big-endian.
- `phoenix`: Arize Phoenix's spans table (`px.Client().get_spans_dataframe()`, or phoenix-client's
  `client.spans.get_spans_dataframe()`) saved with `df.to_parquet(...)` or
  `df.reset_index().to_json(..., orient="records", lines=True)`. Columns read: `context.trace_id`,
  `context.span_id` (or the index), `parent_id`, `name`, `span_kind`, `start_time`, `end_time`,
  `status_code`, `status_message` and the `attributes.*` columns (or one `attributes` column of
  nested objects).

Attributes (OpenInference's, which Phoenix, Langfuse, Arize and OpenLLMetry's instrumentations
write; `gen_ai.*` where OpenInference has none):
- question: the root span's `input.value` (unless the root is an LLM span), else the first
  RETRIEVER span's `input.value`, else the last user message of the first LLM span
  (`llm.input_messages.N.message.role/content`); a JSON value with a `question`, `query` or `input`
  key gives that key's text;
- answer: the root span's `output.value` (unless the root is an LLM span), else the last LLM
  span's first output message (`llm.output_messages.0.message.content`) or its `output.value`
  (`answer`, `output` or `response` of a JSON value);
- contexts: the documents of RERANKER spans (`reranker.output_documents.N.document.content/id/score`)
  when there are any, else of RETRIEVER spans (`retrieval.documents.N.document.content/id/score`);
- timestamp and latency_ms: the root span's start and duration; error: the root span's
  `error.type`, else its status message, when its status is ERROR;
- tokens_in / tokens_out: `llm.token_count.prompt` / `completion` (or `gen_ai.usage.input_tokens`
  / `output_tokens`) summed over LLM spans; model: the first `llm.model_name` (`gen_ai.request.model`);
- variant / feedback: the span attributes named by `monitor.otlp.variant` and `monitor.otlp.feedback`
  (the variant also from the resource's attributes).

A trace becomes a record once its root span (the one without a parent) has arrived and
`LINGER_SPANS` more spans have been read (an exporter sends a trace's spans as they end, the root
last), or at the end of the input. What a record needs and a trace lacks (a root span, an answer)
is never guessed: the trace is reported by its id (`monitor.on_error`: stop, or skip and count);
so is a span that arrives after its trace was written, and a line or message that is not OTLP.
Every such report goes through `SpanReader.problem`."""
from __future__ import annotations

import base64
import codecs
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import msgspec

from ragexp.base.json_lines import json_record
from ragexp.errors import RagexpError
from ragexp.monitor.columns import Malformed

FORMATS = ("auto", "otlp-json", "otlp-proto", "phoenix")
EXTRA = "ragexp[otel]"
LINGER_SPANS = 10_000  # spans read after a trace's root before the trace is written
PHOENIX_BATCH = 4096  # rows of a parquet table read at a time
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
KEPT = ("input.value", "output.value", "retrieval.documents.", "reranker.output_documents.", "llm.input_messages.",
        "llm.output_messages.", "llm.model_name", "llm.token_count.", "gen_ai.request.model", "gen_ai.usage.",
        "openinference.span.kind", "error.type")  # the attributes a record is made of


def proto():
    """opentelemetry-proto's trace messages, or one line saying which extra to install."""
    try:
        from opentelemetry.proto.trace.v1 import trace_pb2
    except ImportError:
        raise RagexpError(f"monitor.source=otlp needs the OpenTelemetry packages: pip install '{EXTRA}'") from None
    return trace_pb2


@dataclass(slots=True)
class Span:
    """One span, with only the attributes a record is made of (flat, dotted names)."""

    trace_id: str  # hex, lower case
    span_id: str
    parent_id: str  # "" for a root span
    kind: str  # OpenInference's span kind in capitals (LLM, RETRIEVER, CHAIN, ...), "" when not said
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: str | None  # None: the span did not fail


def kept(name: str, extra: tuple[str, ...]) -> bool:
    return name.startswith(KEPT) or name in extra


def any_value(value) -> Any:
    """An OTLP AnyValue message as a Python value."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def spans_of(message, extra: tuple[str, ...]) -> Iterator[Span]:
    """The spans of one `TracesData` message (its resource's attributes named in `extra` under
    every span of it, the span's own first)."""
    error = proto().Status.STATUS_CODE_ERROR
    for resource_spans in message.resource_spans:
        shared = {kv.key: any_value(kv.value) for kv in resource_spans.resource.attributes if kv.key in extra}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attributes = {**shared, **{kv.key: any_value(kv.value) for kv in span.attributes if kept(kv.key, extra)}}
                failed = None
                if span.status.code == error:
                    failed = str(attributes.get("error.type") or span.status.message or "error")
                yield Span(span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
                           str(attributes.get("openinference.span.kind") or "").upper(), span.start_time_unix_nano,
                           span.end_time_unix_nano, attributes, failed)


def hex_ids_as_base64(node: Any) -> None:
    """OTLP/JSON's hex trace and span ids (in spans and their links) as protobuf's JSON mapping
    reads bytes: base64. Raises ValueError for an id that is not hex."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                try:
                    node[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise ValueError(f"{key} {value!r} is not hex (OTLP/JSON writes trace and span ids in hex)") from None
            else:
                hex_ids_as_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_ids_as_base64(item)


def traces_data_of_json(line: bytes, number: int):
    """Line `number` of an OTLP/JSON file as a `TracesData` message; ValueError saying why it is not
    one (not UTF-8, not JSON, a lone surrogate, nested too deep: ragexp.base.json_lines's rule; a
    BOM on line 1 is dropped). No cap on a field's size here: a line is a whole batch of spans, and
    the records made of them are read under `monitor.max_field_bytes`."""
    from google.protobuf import json_format

    data = json_record(line, number, max_field_bytes=len(line) + 1)
    if "resourceSpans" not in data and "resource_spans" not in data:
        raise ValueError("not OTLP/JSON: a line of the Collector's file exporter is a JSON object with resourceSpans")
    hex_ids_as_base64(data)
    message = proto().TracesData()
    try:
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except json_format.ParseError as err:
        raise ValueError(f"not OTLP/JSON ({err})") from None
    return message


class SpanReader:
    """The spans of one file in one format; a malformed line or message goes to `problem`."""

    def __init__(self, path: Path, format: str, malformed: Malformed, extra: tuple[str, ...]):
        self.path, self.malformed, self.extra = path, malformed, extra
        self.format = format if format != "auto" else sniff(path)

    def problem(self, where: str, reason: str) -> None:
        """Every malformed line, message, row or trace is reported here, and only here."""
        self.malformed.report(where, reason)

    def __iter__(self) -> Iterator[list[Span]]:
        """Batches of spans: one message (a line, a frame) or a table's batch of rows at a time."""
        if self.format == "otlp-json":
            return self.otlp_json()
        if self.format == "otlp-proto":
            return self.otlp_proto()
        return self.phoenix()

    def otlp_json(self) -> Iterator[list[Span]]:
        proto()
        if pretty_printed(self.path):  # one TracesData written over many lines (the specification's example)
            try:
                yield list(spans_of(traces_data_of_json(self.path.read_bytes(), 1), self.extra))
            except ValueError as err:
                self.bad(1, str(err))
            return
        with self.path.open("rb") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    message = traces_data_of_json(line, number)
                except ValueError as err:
                    self.bad(number, str(err))
                    continue
                yield list(spans_of(message, self.extra))

    def otlp_proto(self) -> Iterator[list[Span]]:
        from google.protobuf.message import DecodeError

        messages = proto()
        with self.path.open("rb") as handle:
            number = 0
            while head := handle.read(4):
                number += 1
                size = struct.unpack(">I", head)[0] if len(head) == 4 else -1
                body = handle.read(size) if size >= 0 else b""
                if size < 0 or len(body) < size:
                    self.bad(number, f"a message cut short ({len(head) + len(body)} bytes where its length prefix "
                             "says more): not OTLP/protobuf in the file exporter's framing (4-byte big-endian length)")
                    return
                try:
                    message = messages.TracesData.FromString(body)
                except DecodeError as err:
                    self.bad(number, f"not an OTLP TracesData message ({err})")
                    continue
                yield list(spans_of(message, self.extra))

    def bad(self, number: int, reason: str) -> None:
        """A line (JSON) or message (protobuf) that is not OTLP: the first one of a file means the
        file is not OTLP at all (an error whatever `on_error` says)."""
        unit = "line" if self.format == "otlp-json" else "message"
        if number == 1:
            raise RagexpError(f"{self.path}:{unit} 1: {reason}; set monitor.otlp.format to the file's format "
                              f"({', '.join(FORMATS[1:])})")
        self.problem(f"{self.path}:{unit} {number}", reason)

    def phoenix(self) -> Iterator[list[Span]]:
        if self.path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq

            table = pq.ParquetFile(self.path)
            index = [c for c in (table.schema_arrow.pandas_metadata or {}).get("index_columns", []) if isinstance(c, str)]
            first = 1
            for batch in table.iter_batches(batch_size=PHOENIX_BATCH):
                rows = batch.to_pylist()
                yield self.phoenix_spans(rows, first, index)
                first += len(rows)
            return
        with self.path.open("rb") as handle:
            rows, first = [], 1
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    row = msgspec.json.decode(line)
                except msgspec.DecodeError as err:
                    self.problem(f"{self.path}:{number}", f"not valid JSON ({err})")
                    continue
                rows.append(row)
                if len(rows) == PHOENIX_BATCH:
                    yield self.phoenix_spans(rows, first)
                    rows, first = [], number + 1
            if rows:
                yield self.phoenix_spans(rows, first)

    def phoenix_spans(self, rows: list, first: int, index: Iterable[str] = ()) -> list[Span]:
        spans = []
        for number, row in enumerate(rows, start=first):
            if not isinstance(row, dict):
                self.problem(f"{self.path}:{number}", f"expected a row of Phoenix's spans table, got {type(row).__name__}")
                continue
            try:
                spans.append(phoenix_span(row, self.extra, index))
            except ValueError as err:
                if number == 1:
                    raise RagexpError(f"{self.path}:1: {err}; set monitor.otlp.format to the file's format "
                                      f"({', '.join(FORMATS[1:])})") from None
                self.problem(f"{self.path}:{number}", str(err))
        return spans


def flat(prefix: str, value: Any, into: dict[str, Any]) -> None:
    """A nested attribute value as OTLP's flat dotted names (lists by their index, as
    OpenInference spells `retrieval.documents.0.document.content`)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            flat(f"{prefix}.{key}" if prefix else str(key), inner, into)
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for i, inner in enumerate(value):
            flat(f"{prefix}.{i}", inner, into)
    else:
        into[prefix] = value


def nanoseconds(value: Any) -> int:
    """A Phoenix time (ISO 8601 text, a datetime, or epoch milliseconds as JSON writes them) in ns."""
    from datetime import UTC, datetime

    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1_000_000) * 1000
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * 1_000_000)  # pandas' to_json writes milliseconds since the epoch
    if isinstance(value, str):
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return nanoseconds(moment)
    raise ValueError(f"a time {value!r} that is neither ISO 8601 nor a number")


def phoenix_span(row: dict, extra: tuple[str, ...], index: Iterable[str] = ()) -> Span:
    """One row of Phoenix's spans table as a span; ValueError naming what it lacks."""
    trace_id = row.get("context.trace_id")
    span_id = row.get("context.span_id") or next((row[c] for c in index if row.get(c)), None) or row.get("span_id")
    if not trace_id or not span_id:
        raise ValueError("not a row of Phoenix's spans table: no context.trace_id and context.span_id")
    attributes: dict[str, Any] = {}
    if isinstance(row.get("attributes"), dict):
        flat("", row["attributes"], attributes)
    for column, value in row.items():
        if column.startswith("attributes.") and value is not None and value == value:  # NaN: no such attribute
            flat(column.removeprefix("attributes."), value, attributes)
    attributes = {k: v for k, v in attributes.items() if kept(k, extra)}
    if "start_time" not in row or "end_time" not in row:
        raise ValueError("no start_time and end_time")
    failed = None
    if str(row.get("status_code") or "").upper() == "ERROR":
        failed = str(attributes.get("error.type") or row.get("status_message") or "error")
    kind = row.get("span_kind") or attributes.get("openinference.span.kind") or ""
    return Span(str(trace_id).lower(), str(span_id).lower(), str(row.get("parent_id") or "").lower(), str(kind).upper(),
                nanoseconds(row["start_time"]), nanoseconds(row["end_time"]), attributes, failed)


def pretty_printed(path: Path) -> bool:
    """Whether an OTLP/JSON file is one object over many lines (its first line alone is no JSON
    object) rather than the file exporter's one object a line."""
    with path.open("rb") as handle:
        first = next((line for line in handle if line.strip()), b"").removeprefix(codecs.BOM_UTF8)
    try:
        return not isinstance(msgspec.json.decode(first), dict)
    except msgspec.DecodeError:
        return first.lstrip().startswith(b"{")


def sniff(path: Path) -> str:
    """The format of a spans file, from its suffix and first bytes."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "phoenix"
    with path.open("rb") as handle:
        head = handle.read(1 << 16).removeprefix(codecs.BOM_UTF8)
    text = head.lstrip()
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        if b'"resourceSpans"' in first or b'"resource_spans"' in first:
            return "otlp-json"
        if b'"context.span_id"' in first or b'"context.trace_id"' in first:
            return "phoenix"
        if b'"resourceSpans"' in text[:4096] and first.strip() == b"{":
            return "otlp-json"  # one TracesData written over many lines
        raise RagexpError(f"{path}:1: not OTLP: neither OTLP/JSON (a JSON object with resourceSpans per line) nor "
                          "Phoenix's spans table (context.trace_id, context.span_id columns); set monitor.otlp.format")
    if suffix in (".json", ".jsonl", ".ndjson") or not head:
        raise RagexpError(f"{path}:1: not OTLP/JSON: the file does not start with a JSON object; set monitor.otlp.format")
    return "otlp-proto"


def text_of(value: Any, keys: tuple[str, ...]) -> str | None:
    """A question or answer from an `input.value` / `output.value`: the text, or of a JSON object
    the first of `keys` it has."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, dict):
        found = next((value[k] for k in keys if k in value), None)
        return None if found is None else found if isinstance(found, str) else json.dumps(found, ensure_ascii=False)
    return None if value is None or value == "" else str(value)


def messages(attributes: dict, prefix: str) -> list[tuple[str, str]]:
    """(role, content) of `llm.input_messages.N.message.*` / `llm.output_messages.N.message.*`, by N."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            number, _, field = key[len(prefix):].partition(".message.")
            if number.isdigit():
                found.setdefault(int(number), {})[field] = value
    return [(str(m.get("role") or ""), str(m.get("content") or "")) for _, m in sorted(found.items())]


def documents(attributes: dict, prefix: str) -> list[dict]:
    """The documents under `prefix` (`retrieval.documents.` ...) as the monitor's contexts, by N."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            number, _, field = key[len(prefix):].partition(".document.")
            if number.isdigit():
                found.setdefault(int(number), {})[field] = value
    return [{"text": str(d.get("content") or ""), "doc_id": d.get("id"), "score": d.get("score")}
            for _, d in sorted(found.items())]


QUESTION_KEYS = ("question", "query", "input")
ANSWER_KEYS = ("answer", "output", "response")


def record_of(spans: list[Span], names: dict[str, str]) -> tuple[dict | None, str]:
    """One trace's spans as a record of the monitor's JSONL, or (None, what it lacks)."""
    spans = sorted(spans, key=lambda s: (s.start_ns, s.span_id))
    roots = [s for s in spans if not s.parent_id]
    if not roots:
        return None, f"no root span (none of its {len(spans)} spans is without a parent)"
    root = roots[0]
    llms = [s for s in spans if s.kind == "LLM"]
    retrievers = [s for s in spans if s.kind == "RETRIEVER"]
    question = text_of(root.attributes.get("input.value"), QUESTION_KEYS) if root.kind != "LLM" else None
    if question is None and retrievers:
        question = text_of(retrievers[0].attributes.get("input.value"), QUESTION_KEYS)
    if question is None and llms:
        users = [content for role, content in messages(llms[0].attributes, "llm.input_messages.") if role == "user"]
        question = users[-1] if users else text_of(llms[0].attributes.get("input.value"), QUESTION_KEYS)
    answer = text_of(root.attributes.get("output.value"), ANSWER_KEYS) if root.kind != "LLM" else None
    if answer is None and llms:
        said = messages(llms[-1].attributes, "llm.output_messages.")
        answer = said[0][1] if said and said[0][1] else text_of(llms[-1].attributes.get("output.value"), ANSWER_KEYS)
    if answer is None and root.error is None:
        return None, ("no answer: no output.value on its root span nor an LLM span's output "
                      "(llm.output_messages, output.value)")
    reranked = [d for s in spans if s.kind == "RERANKER" for d in documents(s.attributes, "reranker.output_documents.")]
    contexts = reranked or [d for s in retrievers for d in documents(s.attributes, "retrieval.documents.")]

    def total(*keys: str) -> int | None:
        values = [v for s in llms for k in keys if isinstance(v := s.attributes.get(k), (int, float))
                  and not isinstance(v, bool)]
        return int(sum(values)) if values else None

    model = next((m for s in spans for k in ("llm.model_name", "gen_ai.request.model") if (m := s.attributes.get(k))), None)
    found = {name: value for name, value in ((n, next((s.attributes[k] for s in reversed(spans) if k in s.attributes),
                                                      None)) for n, k in names.items())}
    return {"timestamp": root.start_ns / 1e6, "query": question, "contexts": contexts, "answer": answer,
            "latency_ms": (root.end_ns - root.start_ns) / 1e6,
            "tokens_in": total("llm.token_count.prompt", "gen_ai.usage.input_tokens"),
            "tokens_out": total("llm.token_count.completion", "gen_ai.usage.output_tokens"),
            "model": model, "error": root.error, "feedback": found["feedback"], "variant": found["variant"],
            "trace_id": root.trace_id}, ""


class Traces:
    """Spans gathered into traces; a trace is given out once its root span arrived and
    `linger` spans followed it (all of them at the end, `finish`)."""

    def __init__(self, reader: SpanReader, linger: int = LINGER_SPANS):
        self.reader, self.linger = reader, linger
        self.pending: dict[str, list[Span]] = {}
        self.rooted: dict[str, int] = {}  # trace id -> spans read when its root arrived (in arrival order)
        self.written: set[str] = set()
        self.seen = 0

    def add(self, spans: list[Span]) -> Iterator[list[Span]]:
        for span in spans:
            self.seen += 1
            if span.trace_id in self.written:
                self.reader.problem(f"{self.reader.path}: trace {span.trace_id}",
                                    f"span {span.span_id} arrived {self.linger} spans or more after its trace's root "
                                    "span, once the trace was read; it is left out")
                continue
            self.pending.setdefault(span.trace_id, []).append(span)
            if not span.parent_id and span.trace_id not in self.rooted:
                self.rooted[span.trace_id] = self.seen
        while self.rooted:
            trace_id, at = next(iter(self.rooted.items()))
            if self.seen - at < self.linger:
                break
            yield self.take(trace_id)

    def take(self, trace_id: str) -> list[Span]:
        self.rooted.pop(trace_id, None)
        self.written.add(trace_id)
        return self.pending.pop(trace_id)

    def finish(self) -> Iterator[list[Span]]:
        for trace_id in list(self.rooted):
            yield self.take(trace_id)
        for trace_id in list(self.pending):
            yield self.take(trace_id)


@dataclass
class Read:
    path: Path  # the records, as the monitor's JSONL
    records: int
    spans: int
    left_out: int  # traces that made no record (reported through Malformed)


def export_spans(paths: list[Path], settings: dict, malformed: Malformed, out: Path) -> Read:
    """The traces of the spans in `paths` written to `out` as the monitor's JSONL."""
    fmt = str(settings.get("format") or "auto")
    if fmt not in FORMATS:
        raise RagexpError(f"monitor.otlp.format: {fmt!r} is not one of {', '.join(FORMATS)}")
    names = {"variant": str(settings.get("variant") or "variant"), "feedback": str(settings.get("feedback") or "feedback")}
    extra = tuple(names.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    records = spans = left_out = 0
    encoder = msgspec.json.Encoder()
    with out.open("wb") as handle:
        for path in paths:
            if not path.is_file():
                raise RagexpError(f"monitor.input: {path} is not a file (looked for {path.resolve()}); "
                                  "set monitor.input=/path/to/spans.jsonl")
            reader = SpanReader(path, fmt, malformed, extra)
            traces = Traces(reader)

            def write(trace: list[Span], reader=reader) -> int:
                record, lacking = record_of(trace, names)
                if record is None:
                    reader.problem(f"{reader.path}: trace {trace[0].trace_id}", lacking)
                    return 0
                handle.write(encoder.encode(record) + b"\n")
                return 1

            for batch in reader:
                spans += len(batch)
                for trace in traces.add(batch):
                    made = write(trace)
                    records, left_out = records + made, left_out + 1 - made
            for trace in traces.finish():
                made = write(trace)
                records, left_out = records + made, left_out + 1 - made
    return Read(out, records, spans, left_out)
