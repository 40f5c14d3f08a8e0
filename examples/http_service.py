"""A tiny RAG service of "your own" for `system=http`: POST {"question": ..., <params>} returns
{"answer": ..., "contexts": [...]}, answered by examples/my_rag.py. Standard library only.

    python examples/http_service.py --port 8000 &
    python -m ragexp system=http system.url=http://127.0.0.1:8000/answer \
        dataset=outputs dataset.path=examples/recorded_outputs.jsonl system.params.top_k=2

It listens on 127.0.0.1 only and stops by itself after `--idle-exit` seconds without a request."""
import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # my_rag beside this file (a script, not a package)

from my_rag import answer  # noqa: E402


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the name http.server calls
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        params = {k: v for k, v in body.items() if k != "question"}
        self.server.seen.append(params)  # type: ignore[attr-defined]  # what the service was asked, for tests
        self.server.last_request = time.monotonic()  # type: ignore[attr-defined]
        reply = json.dumps(answer(str(body.get("question", "")), params)).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):  # quiet
        pass


def serve(port: int = 0) -> ThreadingHTTPServer:
    """The service on 127.0.0.1:`port` (0: a free port; see `server.server_address`), serving in a
    daemon thread; `server.seen` lists the params of every request; `server.shutdown()` stops it."""
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.seen, server.last_request = [], time.monotonic()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--idle-exit", type=float, default=600, help="stop after this many idle seconds")
    args = parser.parse_args()
    server = serve(args.port)
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/answer", flush=True)
    while time.monotonic() - server.last_request < args.idle_exit:  # type: ignore[attr-defined]
        time.sleep(1)
    server.shutdown()


if __name__ == "__main__":
    main()
