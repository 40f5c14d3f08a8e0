"""The OpenAI-compatible embedder against a real HTTP server on 127.0.0.1."""
import json

import numpy as np
import pytest

from ragexp.errors import RagexpError
from ragexp.config.build import from_yaml


def test_embeds_through_the_endpoint_with_the_key_from_the_named_variable(server, monkeypatch):
    monkeypatch.setenv("MY_EMBED_KEY", "sk-test-123")
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="emb-small", api_key_env="MY_EMBED_KEY"), batch_size=2)
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
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env="NO_SUCH_KEY_VAR"))
    with pytest.raises(RagexpError, match=r"embedder.endpoint.api_key_env: environment variable 'NO_SUCH_KEY_VAR' is not set"):
        embedder.embed(["x"])
    assert server.requests == []


def test_garbage_and_errors_are_one_clear_message(server, monkeypatch):
    monkeypatch.setenv("K", "k")
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env="K", max_retries=0))
    server.faults = ["garbage"]
    with pytest.raises(RagexpError, match="embedder"):
        embedder.embed(["a text"])
    server.faults = [500]
    with pytest.raises(RagexpError, match="HTTP 500"):
        embedder.embed(["another text"])


def test_unreachable_endpoint_names_the_url(monkeypatch):
    monkeypatch.setenv("K", "k")
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url="http://127.0.0.1:9/v1", model="m", api_key_env="K", max_retries=0))
    with pytest.raises(RagexpError, match=r"embedder.endpoint.base_url: cannot reach http://127.0.0.1:9/v1"):
        embedder.embed(["x"])


def test_retries_transient_failures_with_the_endpoints_setting(server, monkeypatch):
    monkeypatch.setenv("K", "k")
    server.faults = [500, 429]
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env="K", max_retries=2))
    assert embedder.embed(["a text"]).shape == (1, 64)
    assert len(server.requests) == 3  # two failures, then the answer


def connected(server, prices=None, **settings):
    """An embedder on `server` counting in a Usage of its own, as a run's LLM session connects it."""
    from ragexp.llm.usage import Prices, Usage

    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="emb", api_key_env="K", backoff_s=0.01, **settings), batch_size=2)
    embedder.count_usage(Usage(), Prices(prices or {"emb": {"input": 2.0, "output": 0.0}}))
    return embedder


def test_embeddings_go_through_the_chat_request_path_counted_and_priced(server, monkeypatch):
    """The same sender as chat: 429s (with and without Retry-After) and a 500 retried, every
    request the server saw counted (requests + retries), tokens and cost under `embedder`."""
    monkeypatch.setenv("K", "k")
    server.faults = [{"status": 429, "retry_after": "0"}, 429, 500]
    embedder = connected(server, max_retries=3)
    assert embedder.embed(["a b", "c d", "e f", "g h", "i j"]).shape == (5, 64)
    stats = embedder.usage.stats()
    assert len(server.requests) == 6 == stats["llm_requests"] + stats["llm_retries"]
    assert (stats["llm_requests"], stats["llm_retries"], stats["llm_failures"]) == (3, 3, 0)
    assert stats["embedder_input_tokens"] == 3  # the test server's usage: 1 prompt token per request
    assert stats["embedder_cost_usd"] == pytest.approx(3 * 2.0 / 1e6)


@pytest.mark.process  # timing is its subject: a Retry-After pause that holds every thread
def test_a_retry_after_holds_every_threads_embedding_requests(server, monkeypatch):
    """A 429 with Retry-After pauses the endpoint for every thread: each request that waits for its
    turn once the pause is decided (in any thread) goes out no earlier than the pause's end."""
    import threading
    import time

    monkeypatch.setenv("K", "k")
    server.faults = [{"status": 429, "retry_after": "0.5"}]
    embedder = connected(server, max_retries=2, max_concurrency=4)
    sender, turns = embedder.sender(), []
    wait_turn = sender._wait_turn

    def recorded():
        entered = time.monotonic()
        wait_turn()
        turns.append((entered, time.monotonic(), threading.get_ident()))

    sender._wait_turn = recorded
    first = threading.Thread(target=embedder.embed, args=(["refused first"],))
    first.start()  # its request gets the 429: the pause is decided while it backs off
    while not sender._not_before and first.is_alive():
        time.sleep(0.01)
    threads = [threading.Thread(target=embedder.embed, args=([f"text {n} {m}" for m in range(4)],)) for n in range(3)]
    for t in threads:
        t.start()
    for t in [first, *threads]:
        t.join()
    paused_until = sender._not_before
    decided = paused_until - 0.5  # the sender set the pause to the server's Retry-After from the moment it read it
    after = [(left, thread) for entered, left, thread in turns if entered > decided]
    assert after and all(left >= paused_until for left, _ in after)
    assert len({thread for _, thread in after}) == 4  # the refused one's retry and the three others
    assert embedder.usage.stats()["llm_retries"] == 1 and len(server.requests) == 8  # 7 batches + the retry


def test_requests_per_minute_paces_embedding_batches(server, monkeypatch, tmp_path):
    from ragexp.llm.client import reserve_turn

    monkeypatch.setenv("K", "k")
    reserved = []

    def spy(key, interval_s):
        reserved.append(reserve_turn(key, interval_s))
        return reserved[-1]

    monkeypatch.setattr("ragexp.llm.client.reserve_turn", spy)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where reserve_turn keeps the schedule
    embedder = connected(server, requests_per_minute=600)  # one every 0.1 s
    embedder.embed([f"text {n}" for n in range(6)])
    assert len(reserved) == 3 and all(b - a >= 0.1 - 1e-6 for a, b in zip(reserved, reserved[1:]))
    assert all(r["wall"] >= turn for r, turn in zip(server.requests, reserved))


def test_a_run_counts_its_embedding_requests_with_its_llm_traffic(server, tmp_path):
    from conftest import run_app

    args = ["embedder=openai", f"embedder.endpoint.base_url={server.base_url}", "embedder.endpoint.model=emb",
            "embedder.endpoint.api_key_env=K", "embedder@scoring_embedder=hash", "retriever=dense",
            "dataset.limit=3", "tracker=none", "hydra.run.dir=out", "+llm.prices.emb={input: 1.0, output: 0.0}"]
    server.faults = [429, 500]
    proc = run_app(*args, cwd=tmp_path, env={"K": "k"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    [values] = json.loads((tmp_path / "out" / "results.json").read_text()).values()
    embedding_requests = [r for r in server.requests if r["path"].endswith("/embeddings")]
    assert embedding_requests and len(server.requests) == len(embedding_requests)
    assert values["llm_requests"] + values["llm_retries"] == len(embedding_requests) and values["llm_retries"] == 2
    assert values["embedder_input_tokens"] == values["llm_requests"] and values["embedder_cost_usd"] > 0
