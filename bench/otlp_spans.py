"""How fast monitor.source=otlp reads spans, and in how much memory (docs/how-to/opentelemetry.md).

Writes N spans of RAG traces (a CHAIN root, a RETRIEVER with three documents, an LLM with its
messages and token counts: three spans a trace) as the Collector's file exporter writes them
(OTLP/JSON lines or OTLP/protobuf frames, 100 spans a message, each trace's root after its
children), then reads them into the monitor's records in a fresh process and prints the spans,
records, seconds and the reading process's peak RSS (MB). The file is made by a generator, a
message at a time, so a million spans never sit in memory here either.

    python bench/otlp_spans.py --spans 10000 --format otlp-json
    python bench/otlp_spans.py --spans 1000000 --format otlp-proto
"""
from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

MESSAGE_SPANS = 99  # spans per message: 33 whole traces
READ = """
import json, resource, sys, time
from pathlib import Path
from ragexp.monitor.columns import Malformed
from ragexp.monitor.spans import export_spans
started = time.perf_counter()
read = export_spans([Path(sys.argv[1])], {"format": sys.argv[2]}, Malformed("stop"), Path(sys.argv[3]))
print(json.dumps({"spans": read.spans, "records": read.records, "seconds": round(time.perf_counter() - started, 2),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def trace_spans(n: int, trace_pb2, common_pb2):
    """The three spans of trace n, children first."""
    def attributes(**values):
        out = []
        for key, value in values.items():
            any_value = (common_pb2.AnyValue(int_value=value) if isinstance(value, int)
                         else common_pb2.AnyValue(double_value=value) if isinstance(value, float)
                         else common_pb2.AnyValue(string_value=value))
            out.append(common_pb2.KeyValue(key=key.replace("__", "."), value=any_value))
        return out

    trace_id = n.to_bytes(16, "big")
    start = 1_796_000_000_000_000_000 + n * 1_000_000_000
    root = (n * 3 + 1).to_bytes(8, "big")
    documents = {f"retrieval.documents.{i}.document.{field}": value for i in range(3)
                 for field, value in (("content", f"Document {i} of trace {n}: " + "words " * 60), ("id", f"doc-{i}"),
                                      ("score", 0.9 - i * 0.1))}
    retriever = trace_pb2.Span(trace_id=trace_id, span_id=(n * 3 + 2).to_bytes(8, "big"), parent_span_id=root,
                               name="retrieve", start_time_unix_nano=start + 1_000_000,
                               end_time_unix_nano=start + 20_000_000,
                               attributes=attributes(**{"openinference.span.kind": "RETRIEVER",
                                                        "input.value": f"question {n}?"}, **documents))
    llm = trace_pb2.Span(trace_id=trace_id, span_id=(n * 3 + 3).to_bytes(8, "big"), parent_span_id=root,
                         name="generate", start_time_unix_nano=start + 30_000_000, end_time_unix_nano=start + 800_000_000,
                         attributes=attributes(**{"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                                                  "llm.token_count.prompt": 900, "llm.token_count.completion": 40,
                                                  "llm.input_messages.0.message.role": "user",
                                                  "llm.input_messages.0.message.content": f"question {n}?",
                                                  "llm.output_messages.0.message.role": "assistant",
                                                  "llm.output_messages.0.message.content": f"answer {n}."}))
    chain = trace_pb2.Span(trace_id=trace_id, span_id=root, name="rag", start_time_unix_nano=start,
                           end_time_unix_nano=start + 850_000_000,
                           attributes=attributes(**{"openinference.span.kind": "CHAIN", "input.value": f"question {n}?",
                                                    "output.value": f"answer {n}.", "variant": "AB"[n % 2]}))
    return [retriever, llm, chain]


def hex_ids(node):
    import base64

    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") else hex_ids(v))
                for k, v in node.items()}
    return [hex_ids(v) for v in node] if isinstance(node, list) else node


def write(path: Path, spans: int, fmt: str) -> None:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.proto.common.v1 import common_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2

    with path.open("wb") as out:
        for first in range(0, spans // 3, MESSAGE_SPANS // 3):
            batch = [s for n in range(first, min(first + MESSAGE_SPANS // 3, spans // 3))
                     for s in trace_spans(n, trace_pb2, common_pb2)]
            message = trace_pb2.TracesData(resource_spans=[trace_pb2.ResourceSpans(
                scope_spans=[trace_pb2.ScopeSpans(spans=batch)])])
            if fmt == "otlp-proto":
                data = message.SerializeToString()
                out.write(struct.pack(">I", len(data)) + data)
            else:
                out.write(json.dumps(hex_ids(MessageToDict(message, use_integers_for_enums=True))).encode() + b"\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=10_000)
    parser.add_argument("--format", choices=["otlp-json", "otlp-proto"], default="otlp-json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ragexp-otlp-") as tmp:
        path = Path(tmp) / ("spans.jsonl" if args.format == "otlp-json" else "spans.pb")
        write(path, args.spans, args.format)
        done = subprocess.run([sys.executable, "-c", READ, str(path), args.format, str(Path(tmp) / "records.jsonl")],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        figures = json.loads(done.stdout)
        print(json.dumps({"format": args.format, "file_mb": round(path.stat().st_size / 2**20, 1), **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
