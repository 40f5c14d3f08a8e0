"""The gate's regression check (`gate.baseline=RUN`): paired by question id against a baseline
run, one-sided, Holm across metrics; the LLM judge is the real local OpenAI-protocol server."""
import json

import pytest

from openai_server import judge_json, user_text
from conftest import TEST_KEY_ENV, llm_args, run_app

ENV = {TEST_KEY_ENV: "k"}


def verdicts(drop: float = 0.0, hallucinate: bool = False):
    """The judge's scripted verdict, a function of the prompt (so a rerun gives the same), less `drop`."""
    def chat(body):
        spread = len(user_text(body)) % 5
        return judge_json(8, 7, max(1, 9 - spread - drop), hallucinate)
    return chat


def run(server, folder, *extra):
    args = [*llm_args(server, generator=False), "tracker=none", "dataset.limit=20", f"hydra.run.dir={folder}",
            f"cache.dir={folder}-cache", f"llm.cache_dir={folder}-cache/llm", *extra]
    return run_app(*args, cwd=folder.parent, env=ENV)


def test_a_rerun_passes_and_a_real_drop_fails_with_its_difference_and_interval(server, tmp_path):
    server.chat = verdicts()
    assert run(server, tmp_path / "base").returncode == 0
    same = run(server, tmp_path / "same", f"gate.baseline={tmp_path / 'base'}")
    assert same.returncode == 0, same.stderr
    assert "regression against" in same.stdout and "20 shared questions" in same.stdout
    assert "faithfulness: " in same.stdout and "not significantly worse: ok" in same.stdout

    server.chat = verdicts(drop=2)
    worse = run(server, tmp_path / "worse", f"gate.baseline={tmp_path / 'base'}")
    assert worse.returncode == 3, worse.stdout[-2000:]
    line = next(text for text in worse.stdout.splitlines() if text.strip().startswith("faithfulness:"))
    assert "difference -2.0000" in line and "significantly worse: FAILED" in line
    [values] = json.loads(next((tmp_path / "worse").glob("results.json")).read_text()).values()
    assert values["gate_passed"] == 0

    allowed = run(server, tmp_path / "allowed", f"gate.baseline={tmp_path / 'base'}", "gate.margin={faithfulness:2.5}")
    assert allowed.returncode == 0, allowed.stdout[-2000:]  # within the margin on faithfulness' own 1-10 scale


def test_more_hallucination_is_worse(server, tmp_path):
    server.chat = verdicts()
    assert run(server, tmp_path / "base").returncode == 0
    server.chat = verdicts(hallucinate=True)
    worse = run(server, tmp_path / "worse", f"gate.baseline={tmp_path / 'base'}", "gate.regression=[hallucination]")
    assert worse.returncode == 3
    assert "hallucination: 1.0000 vs baseline 0.0000" in worse.stdout


@pytest.mark.parametrize("setting, message", [
    ("gate.baseline=no/such/folder", "gate.baseline: 'no/such/folder' is neither a run folder nor an MLflow run id"),
    ("gate.regression=[answer_relevance]", "gate.regression: the baseline"),
])
def test_a_baseline_that_cannot_be_used_is_one_line_before_any_work(server, tmp_path, setting, message):
    server.chat = verdicts()
    assert run(server, tmp_path / "base").returncode == 0
    requests = len(server.chat_requests())
    if "regression" in setting:
        setting = f"{setting} gate.baseline={tmp_path / 'base'}"
    done = run(server, tmp_path / "new", *setting.split())
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(server.chat_requests()) == requests  # nothing asked


def test_a_baseline_of_other_questions_is_refused(server, tmp_path):
    server.chat = verdicts()
    assert run(server, tmp_path / "base", "dataset.limit=5").returncode == 0
    table = tmp_path / "base" / "questions.json"
    data = json.loads(table.read_text())
    ids = data["columns"].index("question_id")
    for row in data["data"]:
        row[ids] = f"elsewhere-{row[ids]}"  # the same table, of questions this run does not have
    table.write_text(json.dumps(data))
    done = run(server, tmp_path / "new", f"gate.baseline={tmp_path / 'base'}", "dataset.limit=5")
    assert done.returncode == 2 and "shares no judged question with this run" in done.stderr


def test_ragexp_evaluate_gates_recorded_outputs_against_a_baseline(tmp_path, monkeypatch):
    import ragexp

    monkeypatch.chdir(tmp_path)
    context = "quarryd listens on port 7070. It restarts failed jobs three times. Leases last twelve hours."
    good = [{"id": f"q{i}", "question": f"What does quarryd do, case {i}?", "contexts": [context],
             "answer": "quarryd listens on port 7070."} for i in range(12)]
    bad = [{**row, "answer": "Bananas are rich in potassium and grow in warm places."} for row in good]
    overrides = ["embedder@scoring_embedder=hash", "gate.regression=[faithfulness]"]
    base = ragexp.evaluate(good, overrides=overrides, output_dir=tmp_path / "base")
    again = ragexp.evaluate(good, overrides=[*overrides, f"gate.baseline={base.folder}"], output_dir=tmp_path / "again")
    assert again.passed and "not significantly worse" in " ".join(again.result.gate.checks)
    worse = ragexp.evaluate(bad, overrides=[*overrides, f"gate.baseline={base.folder}"], output_dir=tmp_path / "worse")
    assert not worse.passed and any("faithfulness" in c and "FAILED" in c for c in worse.result.gate.checks)


def test_a_sweep_corrects_across_its_jobs_and_names_the_worse_one(server, tmp_path):
    def chat(body):  # the job that asks with max_tokens 501 is judged 2 points lower on faithfulness
        return verdicts(drop=2 if body["max_tokens"] == 501 else 0)(body)
    server.chat = chat
    assert run(server, tmp_path / "base").returncode == 0
    args = [*llm_args(server, generator=False), "tracker=none", "dataset.limit=20", f"gate.baseline={tmp_path / 'base'}",
            "judge.max_tokens=500,501"]
    swept = run_app("-m", *args, cwd=tmp_path, env=ENV)
    assert swept.returncode == 3, swept.stderr[-2000:]
    assert "Holm across 2 jobs x their metrics" in swept.stdout
    assert "max_tokens=501: faithfulness" in swept.stdout
    assert "quality gate failed in 1 of 2 jobs: max_tokens=501" in swept.stderr


def test_rows_without_ids_pair_by_their_question_on_either_side(tmp_path, monkeypatch):
    """Rows without an id get q1, q2, ... from their place, which a reordered file changes: the
    regression check pairs them by their question's text instead, in this run and in a baseline;
    a run with ids and one without share no pairing id, and that is said."""
    import ragexp
    from ragexp.errors import RagexpError

    monkeypatch.chdir(tmp_path)
    rows = [{"question": f"Which port, case {i}?", "contexts": ["quarryd listens on port 7070."],
             "answer": "Port 7070."} for i in range(6)]
    overrides = ["embedder@scoring_embedder=hash", "gate.regression=[faithfulness]"]
    unnamed = ragexp.evaluate(rows, overrides=overrides, output_dir=tmp_path / "unnamed")
    assert json.loads((tmp_path / "unnamed" / "questions.jsonl").read_text().splitlines()[0])["id_from_row"] is True
    reordered = ragexp.evaluate(list(reversed(rows)), overrides=[*overrides, f"gate.baseline={unnamed.folder}"],
                                output_dir=tmp_path / "a")
    assert reordered.passed and "6 shared questions" in reordered.result.gate.checks[0]
    named = ragexp.evaluate([{**r, "id": f"port-{i}"} for i, r in enumerate(rows)], overrides=overrides,
                            output_dir=tmp_path / "named")
    with pytest.raises(RagexpError, match=r"shares no judged question with this run \(they pair by question id, or by "
                                          r"the question's text where a row had no id\)"):
        ragexp.evaluate(rows, overrides=[*overrides, f"gate.baseline={named.folder}"], output_dir=tmp_path / "b")
    again = ragexp.evaluate([{**r, "id": f"port-{i}"} for i, r in enumerate(rows)],
                            overrides=[*overrides, f"gate.baseline={named.folder}"], output_dir=tmp_path / "c")
    assert again.passed
