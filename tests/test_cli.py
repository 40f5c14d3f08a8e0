"""The real CLI, as a user runs it: a run and a sweep read back from a real MLflow sqlite store,
and the messages a user gets for bad input."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HASH, SHARED_DATA, cli_env, mlflow_runs, needs_shared, options, run_app, run_cli

AGGREGATES = ("avg_context_relevance", "avg_answer_similarity", "avg_faithfulness", "hallucination_rate",
              "total_questions", "failed_questions", "overall_score")


def test_default_run_is_logged_to_mlflow(tmp_path):
    proc = run_app("dataset.limit=12", "run_name=e2e", cwd=tmp_path)  # the default pipeline: real MiniLM
    assert proc.returncode == 0, proc.stderr
    assert "scores by judge 'offline-minilm'" in proc.stdout
    client, runs = mlflow_runs(tmp_path)
    [run] = runs
    assert run.info.run_name == "e2e" and run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert set(AGGREGATES) <= set(metrics)
    assert metrics["total_questions"] == 12 and metrics["failed_questions"] == 0
    assert 1 <= metrics["avg_answer_similarity"] <= 10 and 0 <= metrics["hallucination_rate"] <= 1
    params = run.data.params
    assert params["chunker._target_"] == "ragexp.components.chunkers.RecursiveChunker"
    assert params["chunker.chunk_size"] == "512" and params["dataset.limit"] == "12"
    assert params["retriever.embedder.name"] == "minilm"  # interpolations are logged resolved
    tags = run.data.tags
    assert len(tags["dataset_fingerprint"]) == 16 and tags["judge"] == "offline-minilm"
    assert tags["ragexp_version"] and tags["git_commit"]

    table = client.load_table(run.info.experiment_id, "questions.json", run_ids=[run.info.run_id])
    assert len(table) == 12 and table["question_id"].is_unique
    assert set(table["status"]) == {"judged"} and set(table["judge"]) == {"offline-minilm"}
    assert all(len(json.loads(ids)) == 5 for ids in table["retrieved_chunk_ids"])
    assert table["context_relevance"].between(1, 10).all()
    assert (table["generated_answer"].str.len() > 0).all()

    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "results.json", "questions.json", "overrides.yaml"} <= artifacts
    results = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text())
    assert list(results) == ["e2e"]
    assert results["e2e"]["overall_score"] == pytest.approx(metrics["overall_score"])


def test_multirun_makes_one_parent_and_a_child_per_job(small_sweep):
    client, runs = mlflow_runs(small_sweep.cwd)
    parents = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and len(children) == 2 and len(runs) == 3
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parents[0].info.run_id}
    assert {c.info.run_name for c in children} == {"dense", "bm25"}
    assert {c.data.params["retriever._target_"].rsplit(".", 1)[1] for c in children} == {"DenseRetriever", "BM25Retriever"}
    assert parents[0].info.status == "FINISHED"
    merged = json.loads((small_sweep.sweep_dir / "results.json").read_text())
    assert set(merged) == {"dense", "bm25"}


def test_unknown_option_lists_the_choices(tmp_path):
    proc = run_app("chunker=bogus", cwd=tmp_path)
    assert proc.returncode != 0
    assert "Could not find 'chunker/bogus'" in proc.stderr
    for option in options("chunker"):
        assert option in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["dataset=hotpotqa", "dataset.path=/nowhere/hotpot"],
     "ragexp: error: dataset.path: /nowhere/hotpot does not exist"),
    (["weights.context_relevance=0.5"], "ragexp: error: weights: context_relevance=0.5 + answer_similarity=0.4"),
    (["chunker.chunk_overlap=600"], "ragexp: error: chunker.chunk_overlap: must be less than chunk_size (512), got 600"),
])
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    proc = run_app(*args, "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_malformed_dataset_row_names_file_and_line(tmp_path):
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "a.txt").write_text("Alpha is the first letter.")
    (data / "questions.jsonl").write_text('{"id": "1", "question": "q?", "answer": "a", "golden_docs": ["a"]}\n{oops\n')
    proc = run_app(f"dataset.path={data}", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{data / 'questions.jsonl'}:2: not valid JSON" in proc.stderr


def test_questions_without_answer_or_golden_docs_are_reported_not_fatal(tmp_path):
    data = tmp_path / "data"
    (data / "docs").mkdir(parents=True)
    (data / "docs" / "a.txt").write_text("Alpha is the first letter of the Greek alphabet.")
    (data / "docs" / "b.md").write_text("# Beta\n\nBeta is the second letter.")
    (data / "docs" / "empty.txt").write_text("  \n")
    rows = [
        {"id": "ok", "question": "What is alpha?", "answer": "The first Greek letter.", "golden_docs": ["a"]},
        {"id": "noanswer", "question": "What is beta?", "answer": "", "golden_docs": ["b"]},
        {"id": "nogold", "question": "Which letter is second?", "answer": "Beta."},
    ]
    (data / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = run_app(f"dataset.path={data}", "tracker=none", "retriever.top_k=2", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1 empty documents skipped: empty" in proc.stdout
    assert "1 questions with no expected answer: noanswer" in proc.stdout
    assert "1 questions with no golden documents: nogold" in proc.stdout
    # judged without the metrics that need a reference, which are over the 2 questions that have one
    assert "failed (" not in proc.stdout
    assert re.search(r"avg_answer_similarity +[\d.]+ +\w* +over 2 of 3 questions", proc.stdout), proc.stdout
    [results] = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text()).values()
    assert results["total_questions"] == 3 and results["failed_questions"] == 0
    assert results["n_answer_similarity"] == 2 and "n_faithfulness" not in results


def test_help_and_cfg_import_neither_torch_nor_mlflow(tmp_path):
    for flag in ("--help", "--cfg=job"):
        code = ("import sys\n"
                f"sys.argv = ['ragexp', '{flag}']\n"
                "from ragexp.__main__ import main  # the command's own main (`command` would end the process)\n"
                "try:\n    main()\nexcept SystemExit:\n    pass\n"
                "print('HEAVY', sorted(m for m in ('torch', 'mlflow', 'matplotlib', 'sentence_transformers', 'qdrant_client', 'openai') if m in sys.modules))")
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True)
        assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
    help_text = run_app("--help", cwd=tmp_path).stdout
    assert all(f" {option} " in help_text for option in options('chunker'))
    console_script = Path(sys.executable).parent / "ragexp"  # installed by pyproject's [project.scripts]
    console_help = subprocess.run([str(console_script), "--help"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True)
    assert console_help.stdout == help_text


def test_the_command_ends_without_teardown_but_with_its_exit_handlers_status_and_output(tmp_path):
    """`python -m ragexp` skips the interpreter's teardown of its modules (1.1 s after a sweep), not
    what Python does before it: other threads joined, exit handlers run, output flushed, the status.
    The thread waits for the main thread's end (no clock): it writes after the command's output only
    if the command ends the main thread as Python does, and before the exit handler only if it is joined."""
    code = ("import atexit, sys, threading\n"
            "atexit.register(lambda: print('exit handler ran'))\n"
            "threading.Thread(target=lambda: (threading.main_thread().join(), print('thread ended'))).start()\n"
            "from concurrent.futures import ThreadPoolExecutor\n"
            "pool = ThreadPoolExecutor(2)\n"
            "pool.submit(int)  # idle workers, kept: stopped at exit as Python stops them (joblib's too)\n"
            "sys.argv = ['ragexp'] + sys.argv[1:]\n"
            "from ragexp.__main__ import command\n"
            "command()\n"
            "print('not reached')\n")
    for argv, status in ((["--help"], 0), (["chunker=nope"], 2)):
        proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=tmp_path, env=cli_env(), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == status, proc.stderr
        assert proc.stdout.rstrip().endswith("thread ended\nexit handler ran") and "not reached" not in proc.stdout
    assert "chunker=nope" in proc.stderr or "nope" in proc.stderr


@pytest.mark.slow
@needs_shared("hotpotqa_ircot_dev500")
def test_hotpotqa_end_to_end(tmp_path):
    path = SHARED_DATA / "hotpotqa_ircot_dev500"
    proc = run_cli("dataset=hotpotqa", f"dataset.path={path}", "dataset.limit=10", "retriever=hybrid", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    client, [run] = mlflow_runs(tmp_path)
    assert run.data.metrics["total_questions"] == 10 and run.data.metrics["failed_questions"] == 0
    assert run.data.params["dataset.name"] == "hotpotqa"
    table = client.load_table(run.info.experiment_id, "questions.json", run_ids=[run.info.run_id])
    assert len(table) == 10
