"""A real HTTP server on 127.0.0.1 that speaks the OpenAI protocol, for tests (and, run as a
script, for measurements: `python tests/openai_server.py --port 8000 --latency 0.2`).

- Embeddings are deterministic bag-of-words hashes (texts sharing words get similar vectors).
- `POST .../answer` is a team's RAG service: `{"answer": ..., "contexts": [...]}`, always the same.
- Chat completions answer with `server.chat(body)`: a reply's content (str), or a dict with
  `content` and optionally `usage` ((prompt_tokens, completion_tokens)) and `logprobs` (the
  reply's `logprobs.content`: each token with its log-probability and `top_logprobs`, as
  `char_logprobs` makes them), or with `status` (and
  `headers`, and `body`: its JSON body) for an HTTP error, or with `body`: the whole JSON body of a 200 reply, sent as it is. The default, `auto_reply`, answers the prompts of ragexp's
  generator, judges and LLM reranker (and of `python -m ragexp.synth`) with valid, fixed content. Every reply carries `usage` (default: about
  4 characters per token of the prompt and of the reply).
- `latency` seconds pass before each reply; `in_flight` / `max_in_flight` count the requests
  being served at once, and `mean_in_flight()` the mean number in flight between the first
  arrival and the last reply (each request is served from its arrival to its reply's last byte). `gather = N` holds the first requests until N are in flight together (at
  most 60 s, a guard against a hang), so a client that allows N concurrent requests reaches N however slow the machine.
- Each request is recorded with its arrival time: `time` (time.monotonic) and `wall` (time.time),
  and, once its reply is written, `done` (time.monotonic).
- Faults are scripted: `server.faults` is a list consumed one per request, each an HTTP status
  to answer with (int), a dict {"status": 429, "retry_after": "1"}, "timeout" (reply only after
  `timeout_sleep` seconds), "garbage" (a 200 whose body is not the protocol's JSON), "truncated"
  (a 200 whose JSON body is cut in half, with a matching Content-Length), "dribble" (the normal
  reply, status line and headers included, written one byte every `dribble_s` seconds) or
  {"huge": N} (a 200 whose JSON body is N bytes long).
  `reject_response_format = True` answers 400 to requests that ask for a JSON response format,
  `reject_json_schema = True` to those that ask for a reply with a JSON schema.
- Random faults (fault-injection mode): `fault_rate` (0-1) of the chat requests, drawn from a
  `random.Random(seed)`, get one of `FAULT_KINDS`: 429 with and without Retry-After, 500, a hang
  past the client's timeout (`timeout_sleep`), a truncated 200 body, a 200 that is not JSON, and
  for judge prompts a reply with a missing field, out-of-range scores or mistyped values (other
  prompts get their normal reply then). `injected` counts the faults by kind.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DIM = 64
DRIBBLE = "x-test-dribble"  # a reply's header entry (not sent) that has it written a byte at a time


def bag_of_words(text: str) -> list[float]:
    vector = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return vector if any(vector) else [1.0] + [0.0] * (DIM - 1)


def prompt_text(body: dict) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def user_text(body: dict) -> str:
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[0].get("content", "")) if users else ""


def numbered(text: str) -> list[int]:
    """The numbers of `[N] ...` lines (the sentences or claims a triad prompt lists)."""
    return [int(n) for n in re.findall(r"^\[(\d+)\] ", text, re.MULTILINE)]


def judge_json(context_relevance=8, answer_similarity=7, faithfulness=9, hallucination=False,
               reasoning="scripted reasoning", **extra) -> str:
    return json.dumps({"context_relevance": context_relevance, "answer_similarity": answer_similarity,
                       "faithfulness": faithfulness, "hallucination": hallucination, "reasoning": reasoning, **extra})


RUBRIC_ENTRY = re.compile(r'"(\w+)": \{"reasoning": "<one or two sentences>", "score": <(.*?)>\}')


def rubric_criteria(body: dict) -> dict[str, str]:
    """The criteria a rubric prompt asks for: name -> how its score is to be given."""
    return dict(RUBRIC_ENTRY.findall(prompt_text(body)))


def top_of(scale: str):
    """The best score a rubric criterion's scale allows (`"pass" or "fail"`, `one of "a", "b"`,
    `an integer from 1 to 5`)."""
    if scale.startswith('"pass"'):
        return "pass"
    levels = re.findall(r'"([^"]+)"', scale)
    return levels[-1] if levels else int(re.findall(r"\d+", scale)[-1])


def task(body: dict) -> str:
    """Which ragexp prompt this is, from the JSON keys the prompt asks for."""
    text = prompt_text(body)
    if RUBRIC_ENTRY.search(text):
        return "rubric"
    for key, name in (('"ranking"', "rerank_list"), ('"relevance"', "rerank_point"), ('"grounded"', "synth_verdict"), ('"evidence"', "synth_question"), ('"verdicts"', "verification"),
                      ('"claims"', "claims"), ('"relevant"', "context_relevance"),
                      ('"score"', "answer_relevance"), ('"answer_similarity"', "judge")):
        if key in text:
            return name
    return "generate"


def first_sentence(passage: str) -> str:
    """The first sentence of the first line that is not a heading, verbatim."""
    line = next((line.strip() for line in passage.splitlines() if line.strip() and not line.startswith("#")), "")
    return line[: line.find(". ") + 1] if ". " in line else line


def shared_words(question: str, text: str) -> int:
    """How many distinct words of 3+ letters of the question the text holds (the rerank replies)."""
    words = {w for w in re.findall(r"\w+", question.lower()) if len(w) > 2}
    return len(words & set(re.findall(r"\w+", text.lower())))


def rerank_reply(kind: str, body: dict) -> str:
    """The reranker's prompts answered by word overlap with the question: listwise, the document
    numbers by overlap (ties in their order); pointwise, the overlap as the relevance (at most 10)."""
    text = user_text(body)
    question = re.search(r"<question>(.*?)</question>", text, re.DOTALL)
    question_text = question.group(1) if question else ""
    documents = re.findall(r'<document n="(\d+)">(.*?)</document>', text, re.DOTALL)
    if kind == "rerank_list":
        order = sorted(documents, key=lambda d: -shared_words(question_text, d[1]))
        return json.dumps({"ranking": [int(n) for n, _ in order]})
    return json.dumps({"relevance": min(10, shared_words(question_text, documents[0][1] if documents else ""))})


def auto_reply(body: dict) -> str:
    """Valid, fixed replies to ragexp's default prompts."""
    kind = task(body)
    if kind in ("rerank_list", "rerank_point"):
        return rerank_reply(kind, body)
    if kind == "synth_verdict":
        return json.dumps({"grounded": True, "reason": "every statement is in the passages"})
    if kind == "synth_question":  # ragexp.synth: a question on the first sentence of each passage
        passages = re.split(r"\[Passage \d+\] \([^)]*\)\n", user_text(body))[1:]
        quotes = [first_sentence(p) for p in passages]
        subject = " ".join(quotes[0].split()[:6]).lower().rstrip(".,:;") if quotes else "the passage"
        return json.dumps({"question": f"What do the docs say about {subject}?", "answer": " ".join(quotes),
                           "evidence": quotes})
    if kind == "verification":
        return json.dumps({"verdicts": [{"claim": n, "supported": True, "reason": "stated"} for n in numbered(user_text(body))]})
    if kind == "claims":
        return json.dumps({"claims": ["The answer makes one claim."]})
    if kind == "context_relevance":
        return json.dumps({"relevant": [1]})
    if kind == "answer_relevance":
        return json.dumps({"score": 4, "reasoning": "addresses the question"})
    if kind == "judge":
        return judge_json()
    if kind == "rubric":  # every criterion at the top of its scale
        return json.dumps({name: {"reasoning": "scripted", "score": top_of(scale)} for name, scale in rubric_criteria(body).items()})
    return "The documents say so [Doc 1]."


def char_logprobs(content: str, alternatives: dict[int, dict[str, float]] | None = None) -> list[dict]:
    """`logprobs.content` for a reply written one character a token, each certain (log-probability 0)
    but at the offsets of `alternatives`, whose token has those alternatives (token -> probability),
    its own among them."""
    tokens = []
    for n, char in enumerate(content):
        given = (alternatives or {}).get(n, {char: 1.0})
        tokens.append({"token": char, "logprob": math.log(given.get(char, 1e-9)), "bytes": list(char.encode()),
                       "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in given.items()]})
    return tokens


FAULT_KINDS = ("429_retry_after", "429", "500", "hang", "truncated", "not_json", "missing_field",
               "out_of_range", "mistyped")


def judge_fault(kind: str, body: dict) -> str:
    """A judge reply with the content fault `kind`."""
    reply = json.loads(judge_json())
    if kind == "missing_field":
        del reply["faithfulness"]
    elif kind == "out_of_range":
        reply.update(context_relevance=15, faithfulness=0)
    else:  # mistyped
        reply.update(answer_similarity="high", hallucination="perhaps")
    return json.dumps(reply)


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # many concurrent clients connect at once
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client killed mid-request (a SIGKILLed sweep job) is no error of the server's."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class OpenAIServer:
    def __init__(self, latency: float = 0.0, chat=None, port: int = 0, fault_rate: float = 0.0, seed: int = 0):
        self.requests: list[dict] = []
        self.faults: list = []
        self.fault_rate, self.rng = fault_rate, random.Random(seed)
        self.injected: dict[str, int] = {}
        self.latency = latency
        self.chat = chat or auto_reply
        self.reject_response_format = False
        self.reject_json_schema = False
        self.timeout_sleep = 2.0
        self.dribble_s = 0.5
        self.in_flight = self.max_in_flight = 0
        self.gather = 0
        self.lock = threading.Lock()
        self.gathered = threading.Condition(self.lock)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints
            wbufsize = 1 << 16  # headers and body leave in one write (else a delayed ACK costs ~40 ms)

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                record = {"path": self.path, "body": body, "auth": self.headers.get("Authorization"),
                          "time": time.monotonic(), "wall": time.time()}
                server.requests.append(record)
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.gathered.notify_all()
                    server.gathered.wait_for(lambda: server.max_in_flight >= server.gather, timeout=60)
                try:
                    status, payload, headers = server.answer(self.path, body)
                finally:
                    with server.lock:
                        server.in_flight -= 1
                try:
                    self.reply(status, payload, headers)
                except OSError:  # the client gave up (a timeout)
                    pass
                with server.lock:  # after the last byte: the client may read its reply before this line runs
                    record["done"] = time.monotonic()
                    server.gathered.notify_all()

            def reply(self, status, payload, headers):
                if headers.pop(DRIBBLE, None):
                    return self.dribble(status, payload, headers)
                self.send_response(status)
                headers = {"Content-Type": "application/json", **headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def dribble(self, status, payload, headers):
                lines = [f"HTTP/1.1 {status} OK", "Content-Type: application/json", f"Content-Length: {len(payload)}"]
                for byte in ("\r\n".join(lines).encode() + b"\r\n\r\n" + payload):
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(server.dribble_s)

        self.httpd = Server(("127.0.0.1", port), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def replied(self, timeout: float = 60) -> list[dict]:
        """The chat requests once each has its `done` stamp (a client holds its reply a moment
        before the server's thread stamps it), waiting at most `timeout` seconds for that."""
        with self.lock:
            self.gathered.wait_for(lambda: all("done" in r for r in self.requests), timeout=timeout)
        return self.chat_requests()

    def mean_in_flight(self) -> float:
        """Chat requests in flight on average from the first arrival to the last reply: the
        time each was served (arrival to reply), summed, over that span (0 without a request)."""
        served = [r for r in self.chat_requests() if "done" in r]
        if not served:
            return 0.0
        span = max(r["done"] for r in served) - min(r["time"] for r in served)
        return sum(r["done"] - r["time"] for r in served) / span if span > 0 else float(len(served))

    def answer(self, path: str, body: dict) -> tuple[int, bytes, dict]:
        if self.latency:
            time.sleep(self.latency)
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
        if fault == "timeout":
            time.sleep(self.timeout_sleep)
        elif fault == "garbage":
            return 200, b"<html>this is not json</html>", {"Content-Type": "text/html"}
        elif isinstance(fault, int):
            return error(fault)
        elif isinstance(fault, dict) and "status" in fault:
            return error(fault["status"], {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {})
        elif fault == "dribble":
            status, payload, headers = self.reply_to(path, body)
            return status, payload, {**headers, DRIBBLE: True}
        elif isinstance(fault, dict) and "huge" in fault:
            return 200, json.dumps({"padding": "x" * fault["huge"]}).encode(), {}
        elif fault == "truncated":  # Content-Length matches the bytes sent: only the JSON is cut short
            status, payload, headers = self.reply_to(path, body)
            return status, payload[: len(payload) // 2], headers
        return self.reply_to(path, body)

    def reply_to(self, path: str, body: dict) -> tuple[int, bytes, dict]:
        if path.endswith("/embeddings"):
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [{"object": "embedding", "index": i, "embedding": bag_of_words(t)} for i, t in enumerate(texts)]
            payload = {"object": "list", "data": data, "model": body.get("model"),
                       "usage": {"prompt_tokens": 1, "total_tokens": 1}}
            return 200, json.dumps(payload).encode(), {}
        if path.endswith("/answer"):  # a team's RAG service (system=http), with its default fields
            return 200, json.dumps({"answer": "Port 7070.", "contexts": ["quarryd listens on port 7070."]}).encode(), {}
        if path.endswith("/chat/completions"):
            with self.lock:
                kind = self.rng.choice(FAULT_KINDS) if self.rng.random() < self.fault_rate else None
                if kind:
                    self.injected[kind] = self.injected.get(kind, 0) + 1
            if kind:
                injected = self.random_fault(kind, body)
                if injected is not None:
                    return injected
            if self.reject_response_format and "response_format" in body:
                return error(400, message="response_format is not supported")
            if self.reject_json_schema and body.get("response_format", {}).get("type") == "json_schema":
                return error(400, message="response_format json_schema is not supported")
            reply = self.chat(body)
            reply = reply if isinstance(reply, dict) else {"content": reply}
            if "status" in reply and "body" in reply:  # an HTTP error with its own JSON body
                return reply["status"], json.dumps(reply["body"]).encode(), reply.get("headers", {})
            if "status" in reply:
                return error(reply["status"], reply.get("headers", {}))
            if "body" in reply:
                return 200, json.dumps(reply["body"]).encode(), {}
            content = reply["content"]
            tokens_in, tokens_out = reply.get("usage") or (math.ceil(len(prompt_text(body)) / 4), math.ceil(len(content) / 4))
            choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content},
                      **({"logprobs": {"content": reply["logprobs"]}} if "logprobs" in reply else {})}
            payload = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                       "model": body.get("model"), "choices": [choice],
                       "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}}
            return 200, json.dumps(payload).encode(), {}
        return error(404, message=f"no route {path}")

    def random_fault(self, kind: str, body: dict) -> tuple[int, bytes, dict] | None:
        """The answer with fault `kind`; None for the normal answer (a content fault on a prompt
        that is not the judge's, and a hang once it has slept)."""
        if kind == "429_retry_after":
            return error(429, {"Retry-After": "0"})
        if kind in ("429", "500"):
            return error(int(kind))
        if kind == "hang":
            time.sleep(self.timeout_sleep)
            return None
        if kind == "not_json":
            return 200, b"<html><body>502 Bad Gateway</body></html>", {"Content-Type": "text/html"}
        if kind == "truncated":
            whole = json.dumps({"id": "chatcmpl-cut", "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": auto_reply(body)}}]})
            return 200, whole[: len(whole) // 2].encode(), {}
        if task(body) != "judge":
            return None
        content = judge_fault(kind, body)
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        payload = {"id": "chatcmpl-fault", "object": "chat.completion", "created": int(time.time()), "model": body.get("model"),
                   "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
                   "usage": usage}
        return 200, json.dumps(payload).encode(), {}

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def error(status: int, headers: dict | None = None, message: str | None = None) -> tuple[int, bytes, dict]:
    body = {"error": {"message": message or f"injected {status}", "type": "test", "code": status}}
    return status, json.dumps(body).encode(), headers or {}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of chat requests given a random fault")
    parser.add_argument("--seed", type=int, default=0, help="seed of the faults' random choices")
    args = parser.parse_args()
    with OpenAIServer(latency=args.latency, port=args.port, fault_rate=args.fault_rate, seed=args.seed) as s:
        print(f"serving the OpenAI protocol at {s.base_url} (latency {args.latency}s); Ctrl-C stops", flush=True)
        try:
            while True:
                time.sleep(5)
                print(f"{len(s.chat_requests())} chat requests, max in flight {s.max_in_flight}", flush=True)
        except KeyboardInterrupt:
            pass
