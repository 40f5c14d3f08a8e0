"""`python -m ragexp.synth` as a user runs it: a cloze run on the sample logged to MLflow (counts,
the dataset artifact, its fingerprint tag), an LLM run against the local server resumed from the
request cache, its dry run, and a bad setting."""
import json
import os
import subprocess
import sys

from conftest import ROOT, TEST_KEY_ENV
from test_synth_llm import scripted
from ragexp.config.build import from_yaml

FAST = ["embedder=hash", "embedder@scoring_embedder=hash"]


def synth_cli(*args, cwd, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH")) if p)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "ragexp.synth", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=600)


def test_help_lists_the_options(tmp_path):
    proc = synth_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for text in ("synth/generator=", " cloze ", " llm ", "dataset=", "synth.mix", "duplicate_cosine", "max_per_document"):
        assert text in proc.stdout


def test_cloze_run_on_the_sample_is_logged_to_mlflow(tmp_path):
    import mlflow

    from ragexp.datasets import fingerprint
    from ragexp.synth.output import load_written

    out = tmp_path / "set"
    proc = synth_cli(*FAST, "synth.size=20", f"synth.out={out}", "hydra.run.dir=hydra", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ragexp synth (cloze): kept" in proc.stdout and f"dataset.path={out}" in proc.stdout
    summary = json.loads((out / "synth.json").read_text())
    metrics = summary["metrics"]
    kept = len((out / "questions.jsonl").read_text().splitlines())
    rejected = len((out / "rejections.jsonl").read_text().splitlines())
    assert metrics["kept"] == kept > 0 and metrics["rejected"] == rejected
    assert sum(v for k, v in metrics.items() if k.startswith("rejected_")) == rejected  # by reason, every one
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("ragexp-synth").experiment_id])
    assert run.data.metrics["kept"] == kept and run.data.params["synth.size"] == "20"
    assert run.data.tags["dataset_fingerprint"] == fingerprint(load_written(out))
    assert {"dataset/questions.jsonl", "dataset/corpus.jsonl", "dataset/rejections.jsonl"} <= {
        f.path for f in client.list_artifacts(run.info.run_id, "dataset")}


def test_a_set_written_to_an_mlflow_dataset_reads_back_with_the_same_questions_and_expectations(tmp_path):
    from ragexp.synth.output import load_written

    out = tmp_path / "set"
    proc = synth_cli(*FAST, "synth.size=12", f"synth.out={out}", "synth.mlflow_dataset=quarry-synth", "hydra.run.dir=hydra",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = load_written(out).questions
    assert f"MLflow evaluation dataset 'quarry-synth': {len(written)} records merged, digest" in proc.stdout
    read = from_yaml("dataset/mlflow", name="quarry-synth", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").load().questions

    def expectations(questions):
        return sorted((q.text, q.answers, tuple(sorted(q.golden))) for q in questions)

    assert len(read) == len(written) > 0 and expectations(read) == expectations(written)
    refused = synth_cli(*FAST, "tracker=none", "synth.size=3", f"synth.out={tmp_path / 'b'}", "synth.mlflow_dataset=x",
                        "hydra.run.dir=hydra-b", cwd=tmp_path)
    assert refused.returncode == 2 and "synth.mlflow_dataset: the set goes to the tracker's MLflow store" in refused.stderr
    assert not (tmp_path / "b").exists()  # refused before any work


def llm_args(server, out):
    return [*FAST, "tracker=none", "synth/generator=llm", f"synth.generator.endpoint.base_url={server.base_url}",
            "synth.generator.endpoint.model=synth-model", f"synth.generator.endpoint.api_key_env={TEST_KEY_ENV}",
            "synth.generator.endpoint.backoff_s=0.01", "synth.size=8", f"synth.out={out}", "hydra.run.dir=hydra",
            "cache.dir=cache"]


def test_llm_run_then_a_rerun_from_the_request_cache(server, tmp_path):
    server.chat = scripted
    env = {TEST_KEY_ENV: "sk-test-synth"}
    dry = synth_cli(*llm_args(server, tmp_path / "set"), "dry_run=true", cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout and not server.chat_requests()
    first = synth_cli(*llm_args(server, tmp_path / "set"), cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    sent = len(server.chat_requests())
    metrics = json.loads((tmp_path / "set" / "synth.json").read_text())["metrics"]
    assert metrics["llm_requests"] == sent > 0 and metrics["kept"] > 0 and metrics["input_tokens"] > 0
    assert "per kept question" in first.stdout
    rows = [json.loads(line) for line in (tmp_path / "set" / "questions.jsonl").read_text().splitlines()]
    assert {r["generator"] for r in rows} == {"synth-model"} and {r["source"] for r in rows} == {"synthetic"}
    again = synth_cli(*llm_args(server, tmp_path / "again"), cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert len(server.chat_requests()) == sent  # the second run sent nothing
    metrics2 = json.loads((tmp_path / "again" / "synth.json").read_text())["metrics"]
    assert metrics2["llm_requests"] == 0 and metrics2["llm_cache_hits"] == sent
    assert (tmp_path / "again" / "questions.jsonl").read_text() == (tmp_path / "set" / "questions.jsonl").read_text()
    assert "sk-test-synth" not in (tmp_path / "set" / "synth.json").read_text()


def test_bad_settings_are_one_line(tmp_path):
    proc = synth_cli(*FAST, "tracker=none", "+synth.mix.opinion=0.5", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("ragexp: error: synth.mix: unknown question type opinion")
    assert "Traceback" not in proc.stderr
