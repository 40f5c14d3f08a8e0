"""A real HTTP server on 127.0.0.1 that speaks the OpenAI protocol, for tests.

Embeddings are deterministic bag-of-words hashes (texts sharing words get similar vectors).
Faults are scripted: `server.faults` is a list consumed one per request, each an HTTP
status to answer with, or "garbage" for a 200 whose body is not the protocol's JSON."""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIM = 64


def bag_of_words(text: str) -> list[float]:
    vector = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vector if any(vector) else [1.0] + [0.0] * (DIM - 1)


class OpenAIServer:
    def __init__(self):
        self.requests: list[dict] = []
        self.faults: list = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                fault = server.faults.pop(0) if server.faults else None
                if fault == "garbage":
                    return self.reply(200, b"<html>this is not json</html>", "text/html")
                if isinstance(fault, int):
                    return self.reply(fault, json.dumps({"error": {"message": f"injected {fault}"}}).encode())
                if self.path.endswith("/embeddings"):
                    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    data = [{"object": "embedding", "index": i, "embedding": bag_of_words(t)} for i, t in enumerate(texts)]
                    payload = {"object": "list", "data": data, "model": body.get("model"),
                               "usage": {"prompt_tokens": 1, "total_tokens": 1}}
                    return self.reply(200, json.dumps(payload).encode())
                return self.reply(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())

            def reply(self, status, payload, content_type="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
