"""A deadline and a size cap for a whole HTTP attempt (connect, headers and body), for the clients
ragexp sends requests with: httpx (a team's HTTP service) and httpx2 (the `openai` client's).

Their `timeout` bounds each socket operation, not the attempt: a server that sends its reply a
byte at a time never lets a read wait long, and holds an attempt for as long as it likes; nothing
bounds the size of a reply. So the connections of a client are made through `Bounded`, which
gives every socket operation at most the time left to the attempt (`within(timeout_s,
max_bytes)`, around the request, in the thread that sends it) and counts the bytes read."""
from __future__ import annotations

import importlib
import threading
import time
from contextlib import contextmanager
from types import ModuleType
from typing import Any

_attempt = threading.local()  # .ends (time.monotonic), .bytes_left: the attempt under way in this thread


class ReplyTooLarge(Exception):
    """The reply grew past the attempt's `max_bytes` (read from the wire, before decoding)."""

    def __init__(self, max_bytes: int):
        super().__init__(f"the reply is larger than {max_bytes:,} bytes")
        self.max_bytes = max_bytes


@contextmanager
def within(timeout_s: float, max_bytes: int | None = None):
    """Every socket operation of the requests sent in this block, in this thread, ends by
    `timeout_s` from now (a timeout error of the client's), and the replies read hold at most
    `max_bytes` bytes together (ReplyTooLarge)."""
    _attempt.ends, _attempt.max_bytes, _attempt.bytes_left = time.monotonic() + timeout_s, max_bytes, max_bytes
    try:
        yield
    finally:
        _attempt.ends = _attempt.max_bytes = _attempt.bytes_left = None


def time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` cut to the time left to the attempt (raises `expired` when none is left)."""
    ends = getattr(_attempt, "ends", None)
    if ends is None:
        return timeout
    left = ends - time.monotonic()
    if left <= 0:
        raise expired("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class BoundedStream:
    """A network stream of httpcore's (or httpcore2's) whose every operation keeps to the attempt."""

    def __init__(self, stream: Any, core: ModuleType):
        self.stream, self.core = stream, core

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.stream.read(max_bytes, time_left(timeout, self.core.ReadTimeout))
        left = getattr(_attempt, "bytes_left", None)
        if left is not None:
            _attempt.bytes_left = left - len(data)
            if _attempt.bytes_left < 0:
                raise ReplyTooLarge(_attempt.max_bytes)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, time_left(timeout, self.core.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None, timeout: float | None = None):
        return BoundedStream(self.stream.start_tls(ssl_context, server_hostname, time_left(timeout, self.core.ConnectTimeout)),
                             self.core)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class Bounded:
    """A network backend of httpcore's whose connections are `BoundedStream`s."""

    def __init__(self, backend: Any, core: ModuleType):
        self.backend, self.core = backend, core

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options=None):
        stream = self.backend.connect_tcp(host, port, time_left(timeout, self.core.ConnectTimeout), local_address,
                                          socket_options)
        return BoundedStream(stream, self.core)

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        return BoundedStream(self.backend.connect_unix_socket(path, time_left(timeout, self.core.ConnectTimeout),
                                                              socket_options), self.core)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def bounded(client: Any) -> Any:
    """`client` (an httpx or httpx2 Client, built as usual, proxies from the environment
    included) with the connections of each of its transports made through `Bounded`. A transport
    of another kind is left as it is."""
    for transport in [client._transport, *client._mounts.values()]:
        pool: Any = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, Bounded):
            core = importlib.import_module(type(pool).__module__.partition(".")[0])  # httpcore or httpcore2
            pool._network_backend = Bounded(backend, core)
    return client


def post(url: str, body: bytes, headers: dict[str, str], retries: int, backoff_s: float, timeout_s: float,
         max_reply_bytes: int, timeout_setting: str) -> tuple[bool, int, str]:
    """POSTs `body` to `url`, each whole attempt within `timeout_s` (`timeout_setting` names the
    setting in the error), retried `retries` times (backoff_s, doubling) on connection errors,
    timeouts, HTTP 429 and 5xx. Returns (delivered, attempts, last error). A monitor's webhook and
    a run's spans (tracing=otlp) are sent this way."""
    import httpx

    error = ""
    with bounded(httpx.Client(timeout=timeout_s)) as client:
        for attempt in range(1, retries + 2):
            try:
                with within(timeout_s, max_reply_bytes):
                    response = client.post(url, content=body, headers=headers)
            except httpx.TimeoutException:
                error = f"no whole reply within {timeout_s:g} s ({timeout_setting})"
            except ReplyTooLarge as err:  # delivered, but the answer is not what was expected: not retried
                return False, attempt, str(err)
            except httpx.HTTPError as err:
                error = f"connection error ({type(err).__name__}: {err})"
            else:
                if response.status_code < 300:
                    return True, attempt, ""
                error = f"HTTP {response.status_code}"
                if response.status_code != 429 and response.status_code < 500:
                    return False, attempt, error
            if attempt <= retries:
                time.sleep(backoff_s * 2 ** (attempt - 1))
    return False, retries + 1, error
