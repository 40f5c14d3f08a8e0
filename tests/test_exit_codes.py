"""The exit status a CI can trust (docs/concepts/failures.md), through the real entry point
(`ragexp.__main__.main`, in this process): 0 success, 1 a bug with its traceback (in a Hydra
callback too, never a warning), 2 bad input or config (Hydra's own config errors included, and a
secret on the command line), 3 quality gate failed, 4 run failed."""
import sys

import pytest

from conftest import llm_args
from openai_server import auto_reply, task

FAST = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=4", "tracker=none"]
ENV = "RAGEXP_TEST_LLM_KEY"


def ragexp(monkeypatch, tmp_path, *args: str) -> int:
    """`python -m ragexp ARGS` in this process, in `tmp_path`; its exit status."""
    from ragexp.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ENV, "test-key")
    monkeypatch.setattr(sys, "argv", ["ragexp", *args, f"hydra.run.dir={tmp_path}/run", f"cache.dir={tmp_path}/cache"])
    try:
        main()
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 1
    return 0


def test_success_is_0(monkeypatch, tmp_path):
    assert ragexp(monkeypatch, tmp_path, *FAST) == 0
    assert (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("bad", [
    "chunker=nope",  # Hydra: no such option
    "chunker.chunk_sise=5",  # Hydra: no such key
    "chunker.chunk_size=[oops",  # Hydra: an override it cannot parse
    "weights.context_relevance=0.9",  # ragexp: weights that do not sum to 1
    "max_failed_share=2",  # ragexp: out of range
    "judge.endpoint.api_key_env=sk-proj-abcdefghijklmnop",  # a key, not the name of a variable
])
def test_bad_input_or_config_is_2(monkeypatch, tmp_path, capsys, bad):
    assert ragexp(monkeypatch, tmp_path, *FAST, bad) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_quality_gate_failed_is_3(monkeypatch, tmp_path, capsys):
    assert ragexp(monkeypatch, tmp_path, *FAST, "gate=production", "~gate.thresholds.answer_relevance",
                  "gate.thresholds.mrr.min=1.01") == 3
    assert "quality gate 'production' failed" in capsys.readouterr().err


def test_every_question_failed_is_4(monkeypatch, tmp_path, capsys, server):
    server.chat = lambda body: {"status": 500}  # the judge endpoint is down
    args = llm_args(server, generator=False, **{"judge.endpoint.max_retries": 0})
    assert ragexp(monkeypatch, tmp_path, *FAST, *args) == 4
    assert "run failed: all 4 questions failed (first reason: judge: HTTP 500" in capsys.readouterr().err


@pytest.mark.parametrize("share, code", [(0.5, 4), (0.75, 0)])
def test_more_than_max_failed_share_failed_is_4(monkeypatch, tmp_path, capsys, server, share, code):
    """3 of 4 questions fail: more than 0.5 of them (status 4), not more than 0.75 (status 0)."""
    judged = []

    def chat(body):
        if task(body) == "judge":
            judged.append(1)
            if len(judged) > 1:
                return {"status": 500}
        return auto_reply(body)

    server.chat = chat
    args = llm_args(server, generator=False, **{"judge.endpoint.max_retries": 0, "judge.endpoint.max_concurrency": 1})
    assert ragexp(monkeypatch, tmp_path, *FAST, *args, f"max_failed_share={share}") == code
    err = capsys.readouterr().err
    assert ("3 of 4 questions failed, more than max_failed_share=0.5" in err) == (code == 4)


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
@pytest.mark.parametrize("broken", ["secrets_in_config", "unwritable"])  # RefuseSecrets', WritableFolder's check
def test_a_bug_in_a_callback_is_1_with_its_traceback_never_a_warning(monkeypatch, tmp_path, capsys, recwarn, broken, sweep):
    """Hydra turns an exception raised in a callback into a UserWarning and goes on (the command
    would exit 0); every hook of ragexp's callbacks makes it the command's end instead
    (ragexp.config.callbacks.not_a_warning): a bug, exit 1 with its traceback, nothing run."""
    from ragexp.config import callbacks

    def bug(*args, **kwargs):
        raise RuntimeError(f"a bug in {broken}")

    monkeypatch.setattr(callbacks, broken, bug)
    assert ragexp(monkeypatch, tmp_path, *(["-m"] if sweep else []), *FAST) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1] == f"RuntimeError: a bug in {broken}", err
    assert not [w for w in recwarn if "Callback" in str(w.message)]
    assert not list(tmp_path.rglob("results.json"))
