"""The stage cache: a setting that changes a result misses; everything else is served from disk."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import HASH, TEST_KEY_ENV, cli_env, compose, llm_args, mlflow_runs, run_app, run_cli
from ragexp.cache import main as cache_main
from ragexp.errors import RagexpError
from ragexp.store.cache import key_of
from ragexp.store.embedding_store import EmbeddingStore
from ragexp.run.pipeline import run
from ragexp.config.build import from_yaml


@pytest.fixture
def tiny(tmp_path):
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "port.md").write_text("# Ports\n\nThe server listens on port 7400. The admin UI uses port 7401.\n")
    (data / "docs" / "dlq.txt").write_text("Failed jobs go to the dead-letter queue after five attempts. They expire after seven days.")
    (data / "docs" / "auth.txt").write_text("Clients send a bearer token. Tokens rotate every 30 days.")
    rows = [{"id": "1", "question": "Which port does the server use?", "answer": "Port 7400.", "golden_docs": ["port"]},
            {"id": "2", "question": "When do failed jobs reach the dead-letter queue?", "answer": "After five attempts.",
             "golden_docs": ["dlq"]}]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data, tmp_path / "cache"


def work(data, cache_dir, *overrides):
    cfg = compose(f"dataset.path={data}", f"cache.dir={cache_dir}", "tracker=none", "retriever.top_k=2", *HASH, *overrides)
    return run(cfg)


# each setting, and the config-keyed stages (chunks, hits) it must recompute
CHANGES = [
    (["chunker.chunk_size=40", "chunker.chunk_overlap=0"], {"chunks", "hits"}),
    (["chunker=sentence"], {"chunks", "hits"}),
    (["retriever=bm25"], {"hits"}),
    (["retriever.top_k=1"], {"hits"}),
    (["embedder.batch_size=8"], {"hits"}),  # part of the retriever's settings: a new key
    (["generator.max_sentences=1"], set()),
    (["judge.support_threshold=0.5"], set()),
    (["dataset.limit=1"], {"hits"}),  # same corpus: chunks stay; one question fewer: hits recomputed
]


def context(question_result):
    return [(h.chunk.chunk_id, h.chunk.text) for h in question_result.hits]


@pytest.mark.parametrize("overrides,recomputed", CHANGES, ids=[" ".join(o) for o, _ in CHANGES])
def test_a_setting_that_changes_a_result_misses(tiny, overrides, recomputed):
    """Answers and judgements are keyed by content (question, retrieved texts, answer) and by
    their component's settings: they are recomputed exactly for the questions whose inputs changed."""
    data, cache_dir = tiny
    first = work(data, cache_dir)
    assert first.counters["chunks_computed"] == 1 and first.counters["judgements_computed"] == 2
    changed = work(data, cache_dir, *overrides)
    c = changed.counters
    assert {s for s in ("chunks", "hits") if c.get(f"{s}_computed")} == recomputed
    pairs = list(zip(first.questions, changed.questions))
    new_context = sum(context(a) != context(b) for a, b in pairs)
    generator_changed = any(o.startswith("generator.") for o in overrides)
    judge_changed = any(o.startswith("judge.") for o in overrides)
    assert c.get("answers_computed", 0) == (len(pairs) if generator_changed else new_context)
    new_answer = sum(context(a) != context(b) or a.answer.text != b.answer.text for a, b in pairs)
    assert c.get("judgements_computed", 0) == (len(pairs) if judge_changed else new_answer)
    assert c.get("judgements_cached", 0) + c.get("judgements_computed", 0) == len(changed.questions)


def test_weights_rescore_without_any_model_call(tiny):
    data, cache_dir = tiny
    first = work(data, cache_dir)
    again = work(data, cache_dir, "weights.answer_similarity=0.6", "weights.context_relevance=0.1")
    assert again.counters["embedded_texts"] == 0
    assert not any(v for k, v in again.counters.items() if k.endswith("_computed"))
    assert again.aggregates["avg_faithfulness"] == first.aggregates["avg_faithfulness"]
    assert again.aggregates["overall_score"] != first.aggregates["overall_score"]


def test_disabled_cache_stores_nothing(tiny):
    data, cache_dir = tiny
    result = work(data, cache_dir, "cache.enabled=false")
    assert result.aggregates["total_questions"] == 2
    assert not cache_dir.exists()


def test_embedding_store_is_shared_and_keyed_by_model(tmp_path):
    import numpy as np

    store = EmbeddingStore(str(tmp_path))
    store.put("model-a", ["x", "y"], np.eye(2, dtype=np.float32))
    other = EmbeddingStore(str(tmp_path))  # another connection, as another process would have
    found = other.get("model-a", ["y", "z"])
    assert list(found) == ["y"] and np.array_equal(found["y"], [0, 1])
    assert other.get("model-b", ["x"]) == {}


def test_stage_cache_survives_a_damaged_file(tmp_path):
    cache = from_yaml("cache", dir=str(tmp_path))
    key = key_of("k")
    assert cache.cached("s", key, lambda: [1, 2]) == [1, 2]
    [entry] = (tmp_path / "s").rglob("*.json")
    entry.write_bytes(b"\x80garbage")
    assert cache.cached("s", key, lambda: [3]) == [3]
    assert cache.cached("s", key, lambda: [4]) == [3]


def test_cache_command_shows_and_clears(tiny, capsys):
    data, cache_dir = tiny
    work(data, cache_dir)
    assert cache_main(["info", "--dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    assert "judgements" in out and "chunks" in out and "total" in out
    cache_main(["clear", "--dir", str(cache_dir)])
    assert not cache_dir.exists()


def test_cache_clear_deletes_only_a_stage_cache(tiny, tmp_path, monkeypatch, capsys):
    """A folder without the cache's mark (a typo, `--dir .`, `cache.dir=.`'s working folder) is never
    deleted: one line, exit 2, every file kept."""
    data, cache_dir = tiny
    work(data, cache_dir)
    assert (cache_dir / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    unrelated = tmp_path / "thesis"
    unrelated.mkdir()
    (unrelated / "chapter1.tex").write_text("keep me")
    assert cache_main(["clear", "--dir", str(unrelated)]) == 2
    assert (unrelated / "chapter1.tex").read_text() == "keep me"
    assert "no CACHEDIR.TAG" in capsys.readouterr().err
    monkeypatch.chdir(unrelated)
    (unrelated / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")  # marked, but it is here
    for here in (".", str(tmp_path)):
        assert cache_main(["clear", "--dir", here]) == 2
        assert (unrelated / "chapter1.tex").exists()
    assert "working folder" in capsys.readouterr().err
    assert cache_main(["clear", "--dir", str(cache_dir)]) == 0 and not cache_dir.exists()


def test_a_cache_dir_over_a_folder_of_other_files_is_refused(tiny, tmp_path):
    """`cache.dir=mydata` over a folder holding a user's file (or another tool's CACHEDIR.TAG) is
    refused in one line naming the file (exit 2), the folder left as it was: it is never tagged."""
    data, _ = tiny
    mydata = tmp_path / "mydata"
    mydata.mkdir()
    (mydata / "golden.jsonl").write_text('{"id": "1"}\n')
    done = run_app(f"dataset.path={data}", "cache.dir=mydata", "tracker=none", "retriever.top_k=2", *HASH, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = [x for x in done.stderr.splitlines() if "cache.dir=mydata" in x]
    assert "golden.jsonl" in line and "Traceback" not in done.stderr
    assert sorted(p.name for p in mydata.iterdir()) == ["golden.jsonl"]
    cargo = tmp_path / "target"
    cargo.mkdir()
    (cargo / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n")
    with pytest.raises(RagexpError, match="another tool's"):
        from_yaml("cache", dir=str(cargo))
    assert [p.name for p in cargo.iterdir()] == ["CACHEDIR.TAG"]


def test_clear_deletes_only_what_ragexp_wrote(tiny, capsys):
    """In ragexp's own cache, `clear` deletes the stage folders, the embedding store and the LLM
    cache, and leaves a file a user put there, naming it."""
    data, cache_dir = tiny
    work(data, cache_dir)
    (cache_dir / "llm").mkdir(exist_ok=True)
    (cache_dir / "llm" / "responses.sqlite").write_bytes(b"")
    (cache_dir / "golden.jsonl").write_text("{}\n")
    (cache_dir / "chunks" / "notes.txt").write_text("mine")
    assert cache_main(["clear", "--dir", str(cache_dir)]) == 0
    out = capsys.readouterr().out
    assert "left 2 files ragexp did not write" in out and "golden.jsonl" in out and "chunks/notes.txt" in out
    left = sorted(str(p.relative_to(cache_dir)) for p in cache_dir.rglob("*") if p.is_file())
    assert left == ["CACHEDIR.TAG", "chunks/notes.txt", "golden.jsonl"]
    assert not (cache_dir / "judgements").exists() and not (cache_dir / "llm").exists()


def test_clear_refuses_another_tools_cache(tmp_path, capsys):
    """A folder carrying another tool's CACHEDIR.TAG (cargo's) is not ragexp's to clear."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n")
    (target / "thesis.tex").write_text("keep me")
    assert cache_main(["clear", "--dir", str(target)]) == 2
    assert "another tool's CACHEDIR.TAG" in capsys.readouterr().err
    assert (target / "thesis.tex").read_text() == "keep me"


def test_a_cache_made_before_tagging_is_tagged_and_kept(tiny, tmp_path):
    """A folder holding only ragexp's entries and no tag (a cache made before ragexp tagged its
    folders) is taken as the cache: tagged, and its entries served."""
    data, cache_dir = tiny
    work(data, cache_dir)
    (cache_dir / "CACHEDIR.TAG").unlink()
    again = work(data, cache_dir)
    assert again.counters["judgements_cached"] == 2 and (cache_dir / "CACHEDIR.TAG").is_file()


@pytest.mark.process
def test_a_killed_run_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    """SIGKILL while judging: the same command again judges only the questions left. The judge is the
    LLM judge on a slow test server (0.3 s a reply, 2 in flight), so that judging takes ~2 s and the
    kill lands mid-way: the offline judge embeds every text first, then judges 12 questions in a few
    milliseconds, faster than a poll can catch."""
    from openai_server import OpenAIServer

    with OpenAIServer(latency=0.3) as server:
        args = ["dataset.limit=12", "tracker=none", *llm_args(server, generator=False), "judge.endpoint.max_concurrency=2",
                "hydra.run.dir=out"]
        env = cli_env({TEST_KEY_ENV: "k"})
        proc = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        judgements = tmp_path / ".ragexp-cache" / "judgements"
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and len(list(judgements.rglob("*.json"))) < 3:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = len(list(judgements.rglob("*.json")))
        assert 0 < done < 12, "the kill should land mid-way through judging"

        resumed = run_cli(*args, cwd=tmp_path, env={TEST_KEY_ENV: "k"})
        assert resumed.returncode == 0, resumed.stderr
        assert f"judgements_cached={done}" in resumed.stdout and "chunks_cached=1" in resumed.stdout
        fresh = run_cli(*args[:-1], "hydra.run.dir=fresh", "cache.enabled=false", cwd=tmp_path, env={TEST_KEY_ENV: "k"})
        assert fresh.returncode == 0, fresh.stderr
    [(name, after)] = json.loads((tmp_path / "out" / "results.json").read_text()).items()
    uninterrupted = json.loads((tmp_path / "fresh" / "results.json").read_text())[name]
    spend = {"llm_requests", "judge_input_tokens", "judge_output_tokens", "judge_cost_usd"}  # what this run paid for
    assert after["llm_requests"] == 12 - done and uninterrupted["llm_requests"] == 12  # only the questions left
    assert {k: v for k, v in after.items() if k not in spend} == {k: v for k, v in uninterrupted.items() if k not in spend}


@pytest.mark.process
def test_a_killed_sweep_resumes_and_ends_as_an_uninterrupted_one(tmp_path):
    """SIGKILL while the sweep's second job is generating; the same command again re-does no
    finished work, logs the same results, and closes the dead sweep's parent run as KILLED."""
    args = ["-m", "chunker=fixed,recursive", "retriever=bm25", "dataset.limit=6"]
    killed = tmp_path / "killed"
    killed.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=killed, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    answers, results = killed / ".ragexp-cache" / "answers", "multirun/*/*/*/results.json"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(list(answers.rglob("*.json"))) < 8:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list(killed.glob(results))) == 1, "the kill should land in the second job"
    done = len(list(answers.rglob("*.json"))) - 6
    [killed_sweep] = killed.glob("multirun/*/*")

    resumed = run_cli(*args, cwd=killed)
    assert resumed.returncode == 0, resumed.stderr
    client, runs = mlflow_runs(killed)
    [dead] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep" and r.info.status == "KILLED"]
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep" and r.info.status == "FINISHED"]
    assert dead.data.tags["ragexp.resumed_by"] == parent.info.run_id and "marked KILLED" in resumed.stdout
    jobs = {r.info.run_name: r.data.metrics for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    finished, interrupted = jobs["fixed"], jobs["recursive"]
    assert finished["work_chunks_cached"] == 1 and finished["work_answers_cached"] == 6
    assert finished["work_judgements_cached"] == 6 and finished.get("work_embedded_texts", 0) == 0
    assert not any(finished.get(f"work_{stage}_computed") for stage in ("chunks", "hits", "answers", "judgements"))
    assert interrupted["work_chunks_cached"] == 1 and interrupted["work_answers_cached"] == done
    assert interrupted["work_answers_computed"] == 6 - done

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    uninterrupted = run_cli(*args, "cache.enabled=false", "tracker=none", cwd=fresh)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    [resumed_sweep] = set(killed.glob("multirun/*/*")) - {killed_sweep}
    [fresh_sweep] = fresh.glob("multirun/*/*")
    assert (resumed_sweep / "results.json").read_text() == (fresh_sweep / "results.json").read_text()


def test_a_list_is_written_in_pieces_and_read_back_whole(tmp_path):
    from ragexp.store.cache_entries import FORMAT, encode
    from ragexp.types import Chunk

    cache = from_yaml("cache", dir=str(tmp_path))
    chunks = [Chunk(f"c{i}", f"d{i % 7}", f'text {i}: "quoted" é \n', i, i + 20) for i in range(1000)]
    key = "ab" * 32
    cache.put("chunks", key, chunks)
    assert cache.get("chunks", key) == chunks
    assert json.loads(cache.path("chunks", key).read_bytes()) == {"format": FORMAT, "stage": "chunks", "key": key,
                                                                  "value": encode(chunks)}
    cache.put("chunks", "cd" * 32, [])
    cache.put("hits", key, {"q": 1.5})
    assert cache.get("chunks", "cd" * 32) == [] and cache.get("hits", key) == {"q": 1.5}


def test_an_entry_is_read_member_by_member_and_anything_else_is_unreadable():
    """read_entry reads what entry_pieces writes, and any JSON object with the same members however
    spaced; truncated, trailing or non-object text is unreadable (a miss), never a wrong value."""
    from ragexp.store.cache_entries import FORMAT, encode, entry_pieces, read_entry
    from ragexp.types import Chunk

    chunks = [Chunk(f"c{i}", "d", f"text {i} ]}}, \\", i, i + 1) for i in range(50)]
    head = {"format": FORMAT, "stage": "chunks", "key": "k"}
    written = b"".join(entry_pieces("chunks", "k", chunks)).decode()
    assert read_entry(written) == (head, chunks)
    assert read_entry(json.dumps({**head, "value": encode(chunks)}, indent=2)) == (head, chunks)
    assert read_entry(json.dumps({"value": {"dict": {"q": [1.5, None]}}, **head})) == (head, {"q": [1.5, None]})
    assert read_entry(json.dumps({**head, "value": []})) == (head, [])
    damaged = (written[:-1], written[: len(written) // 2], written + " {}", "[]", "", '{"format": 1,}',
               '{"format": 1, "value": [1,]}', written.replace('", "value"', '" "value"', 1))
    for text in damaged:
        with pytest.raises(ValueError):
            read_entry(text)
