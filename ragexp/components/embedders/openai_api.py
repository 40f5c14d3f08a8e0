"""The `openai` embedder: any OpenAI-compatible embeddings endpoint."""
from __future__ import annotations

import os

import numpy as np

from ragexp.errors import RagexpError
from ragexp.base.settings import PositiveInt
from ragexp.components.embedders.base import Embedder


def api_key(env_var: str, setting: str) -> str:
    """The API key from the environment variable named by `setting`, or an error naming both."""
    key = os.environ.get(env_var or "")
    if not key:
        raise RagexpError(f"{setting}: environment variable {env_var!r} is not set; export it or set {setting}=NAME")
    return key


class OpenAIEmbedder(Embedder):
    """Any OpenAI-compatible embeddings endpoint (OpenAI, vLLM, Ollama, a proxy). `endpoint` is
    the same `ragexp.llm.endpoint.Endpoint` as the LLM components', and its batches go out through
    the same request path (`ragexp.llm.client.Sender`): `max_concurrency`, `requests_per_minute`,
    Retry-After, `max_retries` with backoff from `backoff_s` up to `max_backoff_s`. Its requests,
    retries, failures, tokens and cost (role `embedder`, priced from `llm.prices`) are counted with
    the run's LLM traffic once the run's LLM session connects it; its key comes from the variable
    `api_key_env` names."""

    setting = "embedder.endpoint"

    def __init__(self, endpoint, batch_size: PositiveInt, name: str):
        from ragexp.llm.usage import Prices, Usage

        self.endpoint, self.batch_size, self.name = endpoint, batch_size, name
        self.usage, self.prices = Usage(), Prices(None)  # its own tallies until a run connects it
        self.usage.add_role("embedder")
        self._sender = None

    def key(self) -> str:
        return f"openai:{self.endpoint.base_url}:{self.endpoint.model}"

    def count_usage(self, usage, prices) -> None:
        """Counts its traffic in the run's `usage`, priced from the run's `prices` (LLMSession)."""
        self.usage, self.prices, self._sender = usage, prices, None
        usage.add_role("embedder")

    def sender(self):
        if self._sender is None:
            from ragexp.llm.client import Sender

            url = self.endpoint.base_url

            def give_up(why: str) -> RagexpError:
                if why.startswith("connection error"):
                    return RagexpError(f"{self.setting}.base_url: cannot reach {url} ({why})")
                return RagexpError(f"{self.setting}: {url} (model {self.endpoint.model!r}) did not return embeddings: {why}")

            self._sender = Sender(self.endpoint, self.setting, self.endpoint.api_key(self.setting), self.usage, give_up)
        return self._sender

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        url, model = self.endpoint.base_url, self.endpoint.model
        where = f"{self.setting}: {url} (model {model!r})"

        def read(reply) -> tuple[list[list[float]], int]:
            try:
                data = sorted(reply["data"] or [], key=lambda d: d["index"])
                vectors = [list(d["embedding"]) for d in data]
            except (KeyError, TypeError) as err:  # a 200 whose body is not an embeddings response
                self.usage.count("failures")
                raise RagexpError(f"{where} did not return embeddings ({type(err).__name__}: {err}); "
                                  f"check {self.setting}.base_url and .model") from None
            usage = reply.get("usage") if isinstance(reply, dict) else None
            used = usage.get("prompt_tokens") if isinstance(usage, dict) else 0
            return vectors, used if isinstance(used, int) and used >= 0 else 0

        # (no budget check here: a run's embeddings are not cut off half-way; their cost counts toward budget_usd)
        vectors, used = self.sender().post("/embeddings", lambda: {"model": model, "input": texts}, read)
        self.usage.spend("embedder", used, 0, self.prices.cost(model, used, 0))
        if len(vectors) != len(texts) or any(not v for v in vectors) or len({len(v) for v in vectors}) != 1:
            raise RagexpError(f"{where} returned {len(vectors)} usable embeddings for {len(texts)} texts; "
                              f"check {self.setting}.base_url and .model")
        return np.array(vectors, dtype=np.float32)
