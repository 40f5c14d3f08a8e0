"""An OTLP/HTTP receiver on 127.0.0.1 for tests (tracing=otlp): a real HTTP server in a thread of the
test's process that keeps each POST's body and headers and answers as a collector does."""
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Receiver:
    """An OTLP/HTTP receiver: each POST's body and headers kept; answers `status` (200: an empty
    ExportTraceServiceResponse, as a collector does)."""

    def __init__(self, status: int = 200):
        self.bodies: list[bytes] = []
        self.headers: list[dict] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(body)
                receiver.headers.append(dict(self.headers))
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def spans_file(self, path: Path) -> Path:
        """The received requests as the OpenTelemetry Collector's file exporter writes them
        (`format: proto`: each message preceded by its length)."""
        path.write_bytes(b"".join(struct.pack(">I", len(b)) + b for b in self.bodies))
        return path
