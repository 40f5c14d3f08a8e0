"""`timeout_s` bounds a whole attempt (connect, headers, body) and `max_reply_bytes` the reply, for
every door ragexp sends requests through: the judge's and the generator's endpoint, an embedding
endpoint and a team's HTTP service. The server here writes its reply a byte at a time (status line
and headers too), so no single read ever waits long: only a deadline on the attempt stops it."""
import time

import pytest

from ragexp.errors import QuestionFailed, RagexpError
from ragexp.llm.client import ChatClient, ChatRequest
from ragexp.llm.usage import Prices, Usage
from ragexp.types import Dataset, Question
from ragexp.config.build import from_yaml

ASK = ChatRequest((("system", "be brief"), ("user", "Which port?")))


def chat(server, role, **endpoint):
    client = ChatClient(from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, **{"max_retries": 0, **endpoint}), role,
                        "sk-test", Usage(), Prices({}))
    return lambda: client.complete(ASK, use_cache=False)


def embed(server, **endpoint):
    embedder = from_yaml("embedder/openai", endpoint=from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, **{"max_retries": 0, **endpoint}))
    texts = iter(["which port?", "which host?"])  # a new text each time: no vector is kept in memory
    return lambda: embedder.embed([next(texts)]).shape


def service(server, **settings):
    system = from_yaml("system/http", url=server.base_url + "/answer", **{"max_retries": 0, **settings})
    system.start(Dataset("d", (), ()))
    return lambda: system.respond(Question("q1", "Which port?", ())).answer.text


DOORS = {  # door -> (its request, given settings; the setting a failure names; the error it raises)
    "judge": (lambda server, **s: chat(server, "judge", **s), "judge.endpoint", QuestionFailed),
    "generator": (lambda server, **s: chat(server, "generator", **s), "generator.endpoint", QuestionFailed),
    "embeddings": (embed, "embedder.endpoint", RagexpError),
    "http system": (service, "system", QuestionFailed),
}


@pytest.mark.process  # timing is its subject: a deadline of 2 s met within 3 s
@pytest.mark.parametrize("door", DOORS)
def test_a_reply_sent_a_byte_a_second_fails_at_the_deadline(server, door):
    make, setting, error = DOORS[door]
    request = make(server, timeout_s=2)
    server.faults, server.dribble_s = ["dribble"], 1.0
    started = time.monotonic()
    with pytest.raises(error, match=rf"within 2 s \({setting}.timeout_s\)"):
        request()
    assert time.monotonic() - started < 3
    assert len(server.requests) == 1


@pytest.mark.parametrize("door", DOORS)
def test_a_reply_over_max_reply_bytes_fails_at_that_size_and_is_not_retried(server, door):
    make, setting, error = DOORS[door]
    request = make(server, max_reply_bytes=1_000_000, max_retries=2)
    server.faults = [{"huge": 5_000_000}]
    with pytest.raises(error, match=rf"larger than 1,000,000 bytes \({setting}.max_reply_bytes\)"):
        request()
    assert len(server.requests) == 1


@pytest.mark.process  # timing is its subject: a reply sent slowly within a 5 s deadline
@pytest.mark.parametrize("door", DOORS)
def test_a_reply_within_the_deadline_and_the_cap_is_read_as_ever(server, door):
    """The same settings let a normal reply through, also when it is sent slowly but in time."""
    make, _, _ = DOORS[door]
    request = make(server, timeout_s=5, max_reply_bytes=100_000)
    server.faults, server.dribble_s = ["dribble"], 0.0005
    first, second = request(), request()  # the second on the kept-alive connection
    assert len(server.requests) == 2 and str(first) == str(second) and str(first)
