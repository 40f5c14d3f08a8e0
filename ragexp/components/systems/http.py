"""`system=http`: your RAG service as the system under test. Each question is one JSON POST; the
answer and the contexts are read from the reply by field paths. Requests go through the same
machinery as the LLM client's (ragexp.llm.client): `max_concurrency` in flight, a `timeout_s` for
each attempt as a whole (connect, headers and body), a reply cap of `max_reply_bytes`, retries
with exponential backoff and jitter on 408/409/429/5xx, timeouts and connection errors
(a Retry-After wins), `requests_per_minute` shared by every process on the machine, the answers
cached (by the run's stage cache, under the system's settings) and every failure counted."""
from __future__ import annotations

import logging
import random
import re
import socket
import threading
import time
from collections import Counter
from typing import Any, Mapping
from urllib.parse import urlsplit

from ragexp.base.http_deadline import ReplyTooLarge, bounded, within
from ragexp.components.systems import ContextError, System, hits_from_contexts
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.llm.client import RETRY_STATUS, asked_wait, reserve_turn
from ragexp.base.redact import credential_header, environment_headers, scrub_url
from ragexp.types import Answer, Output, Question
from ragexp.base.settings import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

log = logging.getLogger(__name__)

PLACEHOLDER = re.compile(r"\{(question|question_id|params\.[\w.]+)\}")


def default_body(params: Mapping[str, Any]) -> dict:
    """The question and every param: {"question": "{question}", "top_k": "{params.top_k}", ...}."""
    return {"question": "{question}", **{name: f"{{params.{name}}}" for name in params}}


def lookup(params: Mapping[str, Any], dotted: str):
    value: Any = params
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def render(template: Any, question: Question, params: Mapping[str, Any]) -> Any:
    """The body template filled in: a string that is one placeholder becomes its value as it is
    (a number stays a number); placeholders inside a longer string are replaced by their text."""
    def value(name: str):
        if name == "question":
            return question.text
        if name == "question_id":
            return question.qid
        return lookup(params, name.removeprefix("params."))

    if isinstance(template, str):
        whole = PLACEHOLDER.fullmatch(template)
        if whole:
            return value(whole.group(1))
        return PLACEHOLDER.sub(lambda m: str(value(m.group(1))), template)
    if isinstance(template, Mapping):
        return {k: render(v, question, params) for k, v in template.items()}
    if isinstance(template, list):
        return [render(v, question, params) for v in template]
    return template


def field_at(reply: Any, path: str):
    """The value at a dotted path of a JSON reply (`data.answer`, `choices.0.text`); KeyError if absent."""
    value = reply
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(path)
    return value


def placeholders(template: Any) -> list[str]:
    if isinstance(template, str):
        return PLACEHOLDER.findall(template) + [m for m in re.findall(r"\{([^{}]*)\}", template)
                                                if not PLACEHOLDER.fullmatch("{" + m + "}")]
    if isinstance(template, Mapping):
        return [p for v in template.values() for p in placeholders(v)]
    if isinstance(template, list):
        return [p for v in template for p in placeholders(v)]
    return []


class HttpSystem(System):
    """POSTs `body` (a JSON template: `{question}`, `{question_id}`, `{params.NAME}`; null = the
    question and every param) to `url`, and reads the answer at `answer_field` and the contexts at
    `contexts_field` of the JSON reply (dotted paths; `contexts_field: null` = none). `headers` are
    sent as they are; `headers_env` maps a header to the NAME of the environment variable holding its
    value (`Authorization: "Bearer $MY_TOKEN"` takes $MY_TOKEN from the environment): credentials
    never sit in the config. Its answers are cached under url, body, fields, params and `version`:
    bump `version` when the service changes what it answers (a new model, index or prompt that is
    not one of the params). The rest: see the module's docstring."""

    def __init__(self, url: str | None, body: Any, answer_field: str,
                 contexts_field: str | None, params: Mapping[str, Any] | None,
                 version: str, headers: Mapping[str, str] | None,
                 headers_env: Mapping[str, str] | None, max_concurrency: PositiveInt,
                 timeout_s: PositiveFloat, max_retries: NonNegativeInt, backoff_s: NonNegativeFloat,
                 max_backoff_s: NonNegativeFloat, requests_per_minute: PositiveFloat | None,
                 max_reply_bytes: PositiveInt, name: str | None):
        self.connect_url, self.url = str(url or ""), scrub_url(str(url or ""))
        self.params, self.version = dict(params or {}), str(version)
        self.body = body if body is not None else default_body(self.params)
        self.answer_field, self.contexts_field = answer_field, contexts_field
        self.headers, self.headers_env = dict(headers or {}), dict(headers_env or {})
        self.concurrency, self.timeout_s, self.max_retries = max_concurrency, timeout_s, max_retries
        self.backoff_s, self.max_backoff_s, self.requests_per_minute = backoff_s, max_backoff_s, requests_per_minute
        self.max_reply_bytes = max_reply_bytes
        self.name = name or self.url
        self.counts: Counter = Counter()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._not_before = 0.0
        self._client = None

    @classmethod
    def constraints(cls, url: str | None = None, body: Any = None, params: Mapping | None = None,
                    headers: Mapping | None = None, **_) -> list[str]:
        """The URL's form, the body's placeholders and no credential in `headers` (they belong in
        `headers_env`), checked with the config before any work."""
        problems = []
        parts = urlsplit(str(url or ""))
        if not url:
            problems.append("url: not set; set system.url=http://host:port/path (your service's endpoint)")
        elif parts.scheme not in ("http", "https") or not parts.hostname:
            problems.append(f"url: must be an http(s) URL such as http://127.0.0.1:8000/answer, got {url!r}")
        template = body if body is not None else default_body(params or {})
        for name in placeholders(template):
            if name.startswith("params."):
                try:
                    lookup(params or {}, name.removeprefix("params."))
                except KeyError:
                    problems.append(f"body: {{{name}}} names no param; set system.params.{name.removeprefix('params.')}=...")
            elif name not in ("question", "question_id"):
                problems.append(f"body: unknown placeholder {{{name}}}; use {{question}}, {{question_id}} or {{params.NAME}}")
        problems += [why for header, value in (headers or {}).items() if (why := credential_header(str(header), value))]
        return problems

    def settings(self) -> dict:
        # the URL's credentials are not part of what it answers; its query string may be (not masked here: hashed only)
        return {"system": "http", "url": scrub_url(self.connect_url, query=False), "body": self.body, "answer_field": self.answer_field,
                "contexts_field": self.contexts_field, "params": self.params, "version": self.version}

    def asked(self, question: Question) -> tuple:
        return (question.qid, question.text) if "question_id" in placeholders(self.body) else (question.text,)

    def start(self, dataset) -> list[str]:
        notes = super().start(dataset)
        self._client = self.connect()
        return notes

    def connect(self):
        """Checks the credentials and that the service's host can be reached (a TCP connection, no
        request: a run answered from the cache makes none), then makes the HTTP client."""
        import httpx

        for noisy in ("httpx", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        headers = {"content-type": "application/json", **self.headers}
        headers.update(environment_headers(self.headers_env, "system.headers_env"))
        parts = urlsplit(self.connect_url)
        try:
            socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                     timeout=min(5.0, self.timeout_s)).close()
        except OSError as err:
            raise RagexpError(f"system.url: cannot reach {self.url} ({err.strerror or type(err).__name__}); "
                              "start the service or set system.url=...") from None
        return bounded(httpx.Client(timeout=self.timeout_s, headers=headers, trust_env=False,
                                    limits=httpx.Limits(max_connections=self.concurrency,
                                                        max_keepalive_connections=self.concurrency)))

    def count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    def counters(self) -> dict[str, int]:
        return {f"system_{n}": self.counts[n] for n in ("requests", "retries", "failures")}

    def respond(self, question: Question) -> Output:
        try:
            body = render(self.body, question, self.params)
        except KeyError as err:
            raise RagexpError(f"system.body: {{params.{err.args[0]}}} names no param") from None
        started = time.perf_counter()
        reply = self.post(body)
        latency = round(time.perf_counter() - started, 4)
        answer = self.reply_field(reply, self.answer_field, "system.answer_field")
        if not isinstance(answer, str):
            self.count("failures")
            raise QuestionFailed(f"system: the reply's {self.answer_field!r} is {type(answer).__name__}, not text")
        contexts: Any = ()
        if self.contexts_field:
            contexts = self.reply_field(reply, self.contexts_field,
                                        "system.contexts_field; null if the service returns no contexts")
        try:
            hits = hits_from_contexts(contexts)
        except ContextError as err:
            self.count("failures")
            raise QuestionFailed(f"system: the reply's {self.contexts_field!r}: {err}") from None
        return Output(Answer(answer, latency), hits)

    def reply_field(self, reply: Any, path: str, setting: str) -> Any:
        """The reply's field at `path`; a missing one fails the question, naming the setting."""
        try:
            return field_at(reply, path)
        except KeyError:
            self.count("failures")
            raise QuestionFailed(f"system: the reply of {self.url} has no field {path!r} ({setting})") from None

    def post(self, body: Any) -> Any:
        """The JSON reply to `body`, retried as the LLM client retries; QuestionFailed with the reason."""
        import httpx

        if self._client is None:
            raise RuntimeError("HttpSystem.start() makes its client before the first question")
        attempt = 0
        while True:
            self.wait_turn()
            self.count("requests")
            status, wait, why = None, None, ""
            with self._slots:
                try:
                    with within(self.timeout_s, self.max_reply_bytes):
                        response = self._client.post(self.connect_url, json=body)
                except ReplyTooLarge as err:  # the same question would get the same reply: not retried
                    self.count("failures")
                    raise QuestionFailed(f"system: {self.url}: {err} (system.max_reply_bytes)") from None
                except httpx.TimeoutException:
                    why = f"no whole reply within {self.timeout_s:g} s (system.timeout_s)"
                except httpx.HTTPError as err:
                    why = scrub_url(f"connection error ({type(err).__name__}: {err})")  # httpx may name the URL
                else:
                    status = response.status_code
                    if status < 300:
                        try:
                            return response.json()
                        except ValueError:
                            self.count("failures")
                            raise QuestionFailed(f"system: {self.url} answered HTTP {status} with a body that is not "
                                                 f"JSON: {response.text[:120]!r}") from None
                    why = f"HTTP {status}" + (f" ({response.text[:200].strip()})" if response.text.strip() else "")
                    wait = asked_wait(response.headers)
            if status in (401, 403):
                raise RagexpError(f"system.headers_env: {self.url} refused the request (HTTP {status}); "
                                  "check the credentials in the environment") from None
            transient = status is None or status in RETRY_STATUS or status >= 500
            if not transient or attempt >= self.max_retries:
                self.count("failures")
                raise QuestionFailed(f"system: {self.url}: {why}" + (f" after {attempt + 1} attempts" if attempt else ""))
            attempt += 1
            self.count("retries")
            self.back_off(attempt, wait, why)

    def wait_turn(self) -> None:
        with self._lock:
            delay = self._not_before - time.monotonic()
        if self.requests_per_minute:
            import hashlib

            key = hashlib.sha256(f"system\0{self.url}".encode()).hexdigest()[:24]
            delay = max(delay, reserve_turn(key, 60.0 / self.requests_per_minute) - time.time())
        if delay > 0:
            time.sleep(delay)

    def back_off(self, attempt: int, server_wait: float | None, why: str) -> None:
        if server_wait is not None:  # the service said how long: every request to it waits
            delay = min(server_wait, self.max_backoff_s)
            with self._lock:
                self._not_before = max(self._not_before, time.monotonic() + delay)
        else:
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        log.debug("system: %s; retry %d in %.2fs", why, attempt, delay)
        time.sleep(delay)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
