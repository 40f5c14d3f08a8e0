"""One chat endpoint, shared by every thread of a run. A request is answered from the cache when
it can be; otherwise the budget is checked, the request waits for a free slot (`max_concurrency`)
and its turn (`requests_per_minute`, a Retry-After pause), and is sent, retried on transient
failures with exponential backoff and jitter. Tokens and cost come from the reply's `usage`."""
from __future__ import annotations

import dataclasses
import email.utils
import hashlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Literal

from ragexp.base.http_deadline import ReplyTooLarge, bounded, within
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.logprobs import at_values
from ragexp.store.tracing import llm_request

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429})  # and every 5xx


@dataclass(frozen=True)
class ChatRequest:
    """What is asked: the messages ((role, content) pairs) and the sampling settings. `json_mode`
    is "auto" (ask for a JSON reply; drop the request format if the endpoint rejects it), "on"
    or "off". `repeat` tells the repeats of one request apart (it is part of the cache key).
    `schema`: the JSON schema of the reply (as JSON text), asked for as `response_format`
    json_schema where the endpoint takes it, else as json_object. `data`: the content the messages
    carry (question, contexts, answers, as filled into the prompt): a JSON object of the reply found
    there is a quote, never the verdict (`ragexp.llm.replies`); it follows from the messages, so it is
    the one field not in the cache key (`request_key`), where every other field is, a field added later too.
    `top_logprobs`: 0, or ask for each reply token's log-probability and its N likeliest alternatives
    (`logprobs`, `top_logprobs`; `ragexp.llm.logprobs` reads a value's probabilities from them)."""

    messages: tuple[tuple[str, str], ...]
    temperature: float = 0.0
    max_tokens: int = 500
    json_mode: str = "off"
    repeat: int = 0
    schema: str = ""
    data: tuple[str, ...] = field(default=(), compare=False, repr=False)
    top_logprobs: int = 0

    def followed_by(self, reply: str, message: str) -> ChatRequest:
        """The same request continued by the assistant's `reply` and a new user `message`."""
        return replace(self, messages=(*self.messages, ("assistant", reply), ("user", message)))


@dataclass(frozen=True)
class Reply:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached: bool = False
    schema: bool = False  # asked for with a JSON schema (response_format json_schema): one JSON object
    # each reply token as (text, its length in UTF-8 bytes, its log-probability, its likeliest alternatives
    # ((text, log-probability), ...)); empty when not asked for (`ChatRequest.top_logprobs`) or not given
    logprobs: tuple = ()


JsonMode = Literal["auto", "on", "off", True, False]


def parse_json_mode(value: JsonMode) -> str:
    """The `json_mode` setting (auto / true / false) as "auto", "on" or "off"."""
    return "on" if value is True else "off" if value is False else value


def request_key(endpoint: Endpoint, request: ChatRequest) -> str:
    """The cache key: the model as the endpoint names it (`Endpoint.identity`: its URL and model name;
    a model file ragexp serves: the file's digest, never its port) and every field of the request:
    messages, sampling settings, the reply's schema, the token log-probabilities asked for (never the
    API key)."""
    return hashlib.sha256(json.dumps(stored_request(endpoint, request), sort_keys=True).encode()).hexdigest()


UNKEYED_AT_DEFAULT = ("top_logprobs",)  # added later: keyed only when set, so the keys of requests without it hold


def stored_request(endpoint: Endpoint, request: ChatRequest) -> dict:
    """The request as keyed and as stored beside its reply."""
    keyed = dataclasses.asdict(request)
    for f in dataclasses.fields(request):
        if not f.compare or (f.name in UNKEYED_AT_DEFAULT and keyed[f.name] == f.default):  # `data`: follows from the messages
            keyed.pop(f.name)
    return {**endpoint.identity(), **keyed}


def retry_after(err) -> float | None:
    """Seconds the server asked to wait in the reply of a failed request `err` (`asked_wait`)."""
    return asked_wait(getattr(getattr(err, "response", None), "headers", None) or {})


def asked_wait(headers) -> float | None:
    """Seconds a reply's headers ask the client to wait: Retry-After in seconds or as an HTTP date,
    or retry-after-ms; None when they ask nothing (or nothing readable). Every client reads it here:
    the LLM endpoints, the embedding endpoints and the HTTP system under test."""
    try:
        if headers.get("retry-after-ms"):
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        pass
    return None


class Sender:
    """One endpoint's request path, the same for every kind of request ragexp makes to it (chat
    completions, embeddings): up to `max_concurrency` requests in flight, each waiting its turn
    (`requests_per_minute`, one pace for every process on this machine, and a Retry-After pause
    that holds every thread's requests to the endpoint), retried on 429, 5xx, timeouts,
    connection errors and truncated bodies with exponential backoff and jitter, and counted in
    the run's `usage` (requests, retries, failures). `give_up(reason)` is the error raised when a
    request cannot be answered (a failed question for chat; a stopped run for embeddings)."""

    def __init__(self, endpoint: Endpoint, setting: str, api_key: str, usage, give_up):
        from openai import DefaultHttpxClient, OpenAI

        for noisy in ("httpx", "httpx2", "openai"):  # one INFO line per request otherwise
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.endpoint, self.setting, self.usage, self.give_up = endpoint, setting, usage, give_up
        self._openai = OpenAI(base_url=endpoint.connect_url, api_key=api_key, timeout=endpoint.timeout_s, max_retries=0,
                              http_client=bounded(DefaultHttpxClient()))
        self._openai.default_headers  # noqa: B018 (computed once here, not on the first request: it probes the platform)
        self._slots = threading.BoundedSemaphore(endpoint.max_concurrency)
        self._lock = threading.Lock()
        self._not_before = 0.0  # no request starts before this time (a Retry-After pause)

    def post(self, path: str, body, read, rejected=None):
        """What `read` makes of the JSON reply to `body()` posted to `path` (the body is made
        again for each attempt). `rejected(status)` may take a 400/422 in hand: it returns True
        to send again at once (after changing what `body()` makes)."""
        import openai

        self.usage.count("requests")
        attempt = 0
        error: openai.OpenAIError | json.JSONDecodeError
        while True:
            self._wait_turn()
            with self._slots:
                try:
                    # the body as plain JSON, the reply as parsed JSON (cast_to=object): none of the SDK's
                    # typed request transform and reply models, which cost more CPU than the rest of the path
                    with within(self.endpoint.timeout_s, self.endpoint.max_reply_bytes):
                        reply = self._openai.post(path, body=body(), cast_to=object)
                    return read(reply)
                except ReplyTooLarge as err:  # the same request would get the same reply: not retried
                    self.usage.count("failures")
                    raise self.give_up(f"{self.endpoint.base_url}: {err} ({self.setting}.max_reply_bytes)") from None
                except openai.APIStatusError as err:
                    error, status = err, err.status_code
                except openai.APIConnectionError as err:  # includes timeouts
                    error, status = err, None
                except json.JSONDecodeError as err:  # a 200 whose JSON body is cut short: retried as a transient fault
                    error, status = err, None
                except openai.OpenAIError as err:  # a reply the client cannot read
                    self.usage.count("failures")
                    raise self.give_up(f"{self.endpoint.base_url} sent an unreadable response "
                                       f"({type(err).__name__}: {err})") from None
            if status in (401, 403):
                raise RagexpError(f"{self.setting}.api_key_env: {self.endpoint.base_url} refused the key from "
                                  f"${self.endpoint.api_key_env} (HTTP {status})") from None
            if status == 404:
                raise RagexpError(f"{self.setting}.model: {self.endpoint.base_url} has no model {self.endpoint.model!r} "
                                  f"at {path} (HTTP 404); check {self.setting}.base_url and .model") from None
            if status == 400 and too_long(error):  # the same prompt would be as long again: not retried
                self.usage.count("failures")
                raise self.give_up(f"the prompt is longer than the model's context ({self.describe(error)}); "
                                   f"shorten it, or give the model more ({self.setting}.context_size for a model "
                                   "ragexp serves)") from None
            if status in (400, 422) and rejected is not None and rejected(status):
                continue
            if not (status is None or status in RETRY_STATUS or status >= 500) or attempt >= self.endpoint.max_retries:
                self.usage.count("failures")
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise self.give_up(f"{self.describe(error)}{tries}") from None
            attempt += 1
            self.usage.count("retries")
            self._back_off(attempt, retry_after(error) if status is not None else None, self.describe(error))

    def describe(self, error) -> str:
        return describe(error, f"no whole reply within {self.endpoint.timeout_s:g} s ({self.setting}.timeout_s)")

    def _wait_turn(self) -> None:
        with self._lock:
            delay = self._not_before - time.monotonic()
        if self.endpoint.requests_per_minute:  # one pace for every process on this machine
            key = hashlib.sha256(f"{self.endpoint.base_url}\0{self.endpoint.model}".encode()).hexdigest()[:24]
            delay = max(delay, reserve_turn(key, 60.0 / self.endpoint.requests_per_minute) - time.time())
        if delay > 0:
            time.sleep(delay)

    def _back_off(self, attempt: int, server_wait: float | None, why: str) -> None:
        if server_wait is not None:  # the server said how long: every request to it waits
            delay = min(server_wait, self.endpoint.max_backoff_s)
            with self._lock:
                self._not_before = max(self._not_before, time.monotonic() + delay)
        else:
            delay = min(self.endpoint.max_backoff_s, self.endpoint.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)
        log.debug("%s: %s; retry %d in %.2fs", self.setting, why, attempt, delay)
        time.sleep(delay)


class ChatClient:
    """Thread-safe; one per LLM component of a run (`role` is "generator" or "judge"). Requests
    go out through the endpoint's `Sender`."""

    def __init__(self, endpoint: Endpoint, role: str, api_key: str, usage, prices, cache=None, setting: str | None = None):
        self.endpoint, self.role, self.usage, self.prices, self.cache = endpoint, role, usage, prices, cache
        self.setting = setting or f"{role}.endpoint"
        self.sender = Sender(endpoint, self.setting, api_key, usage, lambda why: QuestionFailed(f"{role}: {why}"))
        self._json_format = True  # json_mode "auto": cleared when the endpoint rejects response_format
        self._schema_format = True  # a request with a schema: cleared when the endpoint rejects json_schema
        self._logprobs = True  # a request with top_logprobs: cleared when the endpoint rejects logprobs

    def count(self, name: str, n: int = 1) -> None:
        self.usage.count(name, self.role, n)

    def complete(self, request: ChatRequest, store: bool = True, use_cache: bool = True) -> Reply:
        """The reply to `request`: from the cache when `use_cache` and stored, else sent. A sent
        reply is stored only when `store` (a caller that must check the reply first passes False and
        calls `store` once it has read it: a reply that could not be used is never cached)."""
        with llm_request(self.role, self.endpoint.model, request.messages) as span:  # tracing=on
            reply, cost = self._complete(request, store, use_cache)
            if span is not None:
                span["outputs"] = reply.text
                span["attributes"].update({
                    "mlflow.chat.tokenUsage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                                               "total_tokens": reply.input_tokens + reply.output_tokens},
                    "mlflow.llm.cost": {"total_cost": cost}, "ragexp.cache": "hit" if reply.cached else "miss"})
            return reply

    def _complete(self, request: ChatRequest, store: bool, use_cache: bool) -> tuple[Reply, float]:
        key = request_key(self.endpoint, request)
        if self.cache is not None and use_cache:
            hit = self.cache.get(key)
            if hit is not None:
                self.usage.count("cache_hits")
                return Reply(hit["text"], hit["input_tokens"], hit["output_tokens"], cached=True,
                             schema=bool(request.schema) and hit.get("schema", False),
                             logprobs=token_logprobs(hit.get("logprobs"))), 0.0
        self.usage.check_budget()
        reply = self._send(request)
        cost = self.prices.cost(self.endpoint.model, reply.input_tokens, reply.output_tokens)
        self.usage.spend(self.role, reply.input_tokens, reply.output_tokens, cost)
        if store:
            self.store(request, reply)
        return reply, cost

    def store(self, request: ChatRequest, reply: Reply) -> None:
        """Caches a reply that was sent (and, for a checked reply, could be used)."""
        if self.cache is None or reply.cached:
            return
        stored = {"text": reply.text, "input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                  **({"schema": True} if reply.schema else {}), **({"logprobs": reply.logprobs} if reply.logprobs else {})}
        self.cache.put(request_key(self.endpoint, request), stored_request(self.endpoint, request), stored)

    def _params(self, request: ChatRequest, json_format: bool, schema: bool = False, logprobs: bool = False) -> dict:
        params = {"model": self.endpoint.model, "temperature": request.temperature, "max_tokens": request.max_tokens,
                  "messages": [{"role": role, "content": content} for role, content in request.messages]}
        if logprobs:
            params.update(logprobs=True, top_logprobs=request.top_logprobs)
        if json_format and schema:
            params["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "reply", "schema": json.loads(request.schema)}}
        elif json_format:
            params["response_format"] = {"type": "json_object"}
        return params

    def _json_wanted(self, request: ChatRequest) -> bool:
        return request.json_mode == "on" or (request.json_mode == "auto" and self._json_format)

    def _send(self, request: ChatRequest) -> Reply:
        sent = {"json": False, "schema": False, "logprobs": False}  # what the attempt being answered asked for

        def body() -> dict:
            sent["json"] = self._json_wanted(request)
            sent["schema"] = sent["json"] and bool(request.schema) and self._schema_format
            sent["logprobs"] = bool(request.top_logprobs) and self._logprobs
            return self._params(request, sent["json"], sent["schema"], sent["logprobs"])

        def rejected(status: int) -> bool:  # an endpoint without log-probabilities, JSON schemas or JSON mode: asked again without
            if sent["logprobs"]:
                log.warning("%s: %s rejected logprobs (HTTP %s); asking without them from now on (scores are the "
                            "sampled values)", self.setting, self.endpoint.base_url, status)
                self._logprobs = False
                return True
            if sent["schema"] and request.json_mode != "off":
                log.warning("%s: %s rejected response_format=json_schema (HTTP %s); asking for json_object from now on",
                            self.setting, self.endpoint.base_url, status)
                self._schema_format = False
                return True
            if not (sent["json"] and request.json_mode == "auto"):
                return False
            log.warning("%s: %s rejected response_format=json_object (HTTP %s); asking without it from now on",
                        self.setting, self.endpoint.base_url, status)
            self._json_format = False
            return True

        reply = self.sender.post("/chat/completions", body, self._read, rejected)
        return replace(reply, schema=sent["schema"])

    def _read(self, completion) -> Reply:
        """The reply's text and token counts from the completion's JSON (a str when the endpoint
        sent a body that is not JSON)."""
        try:
            text = completion["choices"][0]["message"]["content"] or ""
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            self.usage.count("failures")
            raise QuestionFailed(f"{self.role}: {self.endpoint.base_url} sent no chat completion") from None
        usage = completion.get("usage")
        return Reply(text, tokens(usage, "prompt_tokens"), tokens(usage, "completion_tokens"),
                     logprobs=token_logprobs(at_values(reply_logprobs(completion), text)))


LEAST_LOGPROB = -9.0  # alternatives less likely than this (about 1 in 8,000) are not kept


def reply_logprobs(completion) -> list:
    """The reply's tokens as `Reply.logprobs` keeps them, from the completion's `logprobs.content`
    (the OpenAI protocol; llama.cpp's server gives the same): [] when it has none."""
    try:
        content = completion["choices"][0].get("logprobs") or {}
        entries = content.get("content") or [] if isinstance(content, dict) else []
    except (KeyError, IndexError, TypeError, AttributeError):
        return []
    kept = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("token"), str):
            return []
        given = entry.get("bytes")
        size = len(given) if isinstance(given, list) else len(entry["token"].encode())
        alternatives = [[a["token"], round(float(a["logprob"]), 4)] for a in entry.get("top_logprobs") or []
                        if isinstance(a, dict) and isinstance(a.get("token"), str)
                        and isinstance(a.get("logprob"), (int, float)) and a["logprob"] >= LEAST_LOGPROB]
        logprob = entry.get("logprob")
        kept.append([entry["token"], size, round(float(logprob), 4) if isinstance(logprob, (int, float)) else None,
                     alternatives])
    return kept


def token_logprobs(stored) -> tuple:
    """`Reply.logprobs` from what `reply_logprobs` made (or the cache kept): () for anything else."""
    if not isinstance(stored, list):
        return ()
    try:
        return tuple((str(t), int(n), None if p is None else float(p), tuple((str(a), float(q)) for a, q in alts))
                     for t, n, p, alts in stored)
    except (TypeError, ValueError):
        return ()


def tokens(usage, name: str) -> int:
    """A token count of the reply's `usage` object; 0 when it is missing or not a count."""
    value = usage.get(name) if isinstance(usage, dict) else None
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 2**63 else 0


def too_long(err) -> bool:
    """Whether an HTTP 400 says the prompt does not fit the model's context (llama.cpp's
    `exceed_context_size_error`, OpenAI's `context_length_exceeded`)."""
    body = getattr(err, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return False
    return error.get("type") == "exceed_context_size_error" or error.get("code") == "context_length_exceeded"


def describe(err, timed_out: str = "request timed out") -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"a truncated or invalid JSON body ({err})"
    status = getattr(err, "status_code", None)
    if status is None:
        return timed_out if type(err).__name__ == "APITimeoutError" else f"connection error ({err})"
    message = getattr(err, "message", "") or str(err)
    return f"HTTP {status}" + (f" ({message[:200]})" if message else "")


def reserve_turn(key: str, interval_s: float) -> float:
    """The wall-clock time at which the caller may send its next request to the endpoint named by
    `key`, spaced `interval_s` after the previous reservation by any process on this machine (a
    file under the temporary folder, locked while read and moved on): parallel sweep jobs share
    one requests-per-minute limit."""
    import fcntl
    import tempfile
    from pathlib import Path

    path = Path(tempfile.gettempdir()) / "ragexp-pacing" / key
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        file.seek(0)
        text = file.read().strip()
        start = max(time.time(), float(text) if text else 0.0)
        file.seek(0)
        file.truncate()
        file.write(repr(start + interval_s))
    return start
