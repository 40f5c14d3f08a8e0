"""The OpenAI-compatible embedder against a real HTTP server on 127.0.0.1."""
import numpy as np
import pytest

from ragexp.components.embedders import OpenAIEmbedder
from ragexp.errors import RagexpError
from ragexp.llm.endpoint import Endpoint


def test_embeds_through_the_endpoint_with_the_key_from_the_named_variable(server, monkeypatch):
    monkeypatch.setenv("MY_EMBED_KEY", "sk-test-123")
    embedder = OpenAIEmbedder(Endpoint(server.base_url, "emb-small", "MY_EMBED_KEY"), batch_size=2)
    vectors = embedder.embed(["port 7400 server", "server port 7400", "bananas", "port 7400 server"])
    assert vectors.shape == (4, 64)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert vectors[0] @ vectors[1] == pytest.approx(1.0)  # same words
    assert vectors[0] @ vectors[2] < 0.5
    # 3 distinct texts in batches of 2; the repeated text is embedded once
    assert [len(r["body"]["input"]) for r in server.requests] == [2, 1]
    assert {r["body"]["model"] for r in server.requests} == {"emb-small"}
    assert server.requests[0]["auth"] == "Bearer sk-test-123"


def test_missing_key_names_the_variable_and_the_setting(server, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    embedder = OpenAIEmbedder(Endpoint(server.base_url, "m", "NO_SUCH_KEY_VAR"))
    with pytest.raises(RagexpError, match=r"embedder.endpoint.api_key_env: environment variable 'NO_SUCH_KEY_VAR' is not set"):
        embedder.embed(["x"])
    assert server.requests == []


def test_garbage_and_errors_are_one_clear_message(server, monkeypatch):
    monkeypatch.setenv("K", "k")
    embedder = OpenAIEmbedder(Endpoint(server.base_url, "m", "K", max_retries=0))
    server.faults = ["garbage"]
    with pytest.raises(RagexpError, match="embedder"):
        embedder.embed(["a text"])
    server.faults = [500]
    with pytest.raises(RagexpError, match="HTTP 500"):
        embedder.embed(["another text"])


def test_unreachable_endpoint_names_the_url(monkeypatch):
    monkeypatch.setenv("K", "k")
    embedder = OpenAIEmbedder(Endpoint("http://127.0.0.1:9/v1", "m", "K", max_retries=0, timeout_s=2))
    with pytest.raises(RagexpError, match=r"embedder.endpoint.base_url: cannot reach http://127.0.0.1:9/v1"):
        embedder.embed(["x"])


def test_retries_transient_failures_with_the_endpoints_setting(server, monkeypatch):
    monkeypatch.setenv("K", "k")
    server.faults = [500, 429]
    embedder = OpenAIEmbedder(Endpoint(server.base_url, "m", "K", max_retries=2))
    assert embedder.embed(["a text"]).shape == (1, 64)
    assert len(server.requests) == 3  # two failures, then the answer
