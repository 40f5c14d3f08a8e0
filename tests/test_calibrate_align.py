"""python -m ragexp.calibrate --outputs FILE --align: the judge chosen on the tuning part only,
checked on the held-out part against the configured judge, written as a config file that runs
again to the same judgements; the plan and its requests before any is sent; the cap. The judge is
the single-call LLM judge against the OpenAI test server, scripted to score by the instruction it
was given (a real HTTP server: the requests are counted there)."""
import json

import pytest

from conftest import TEST_KEY_ENV, call_in, run_app
from openai_server import judge_json, prompt_text
from ragexp.calibrate.align import examples, parts, with_examples

VARIANTS = {"strict": "VARIANT-B: you are a strict evaluator. Score faithfulness harshly.\nReply with JSON.",
            "kind": "VARIANT-C: you are a kind evaluator.\nReply with JSON."}


def scripted(body: dict) -> str:
    """Faithfulness 2 under the strict variant, 9 otherwise: what a variant changes is visible."""
    system = body["messages"][0]["content"]
    return judge_json(faithfulness=2 if "VARIANT-B" in system else 9)


def judge_args(server) -> list[str]:
    return ["judge=llm", f"judge.endpoint.base_url={server.base_url}", "judge.endpoint.model=gpt-4o-mini",
            f"judge.endpoint.api_key_env={TEST_KEY_ENV}", "judge.endpoint.backoff_s=0.01", "embedder@scoring_embedder=hash"]


def write_rows(path, labels: dict[str, int]) -> None:
    with path.open("w") as out:
        for i, (qid, label) in enumerate(labels.items()):
            out.write(json.dumps({"id": qid, "question": f"What port does Quarry{i} use?",
                                  "contexts": [f"Quarry{i} listens on port {7000 + i}."], "answer": f"Port {7000 + i}.",
                                  "reference": f"port {7000 + i}", "faithfulness": label}) + "\n")


def calibrate(*args, cwd, env):
    from ragexp.calibrate.__main__ import main

    return call_in(lambda: main(list(args)), ["python -m ragexp.calibrate", *args], cwd, env)


@pytest.fixture
def planted(tmp_path):
    """20 rows whose labels agree with the strict variant on the tuning part and with the configured
    prompt on the held-out part: a choice that read the held-out labels would not pick strict."""
    ids = [f"q{i:02d}" for i in range(20)]
    tuning, held = parts(ids, 0.3, 0, None)
    path = tmp_path / "labelled.jsonl"
    write_rows(path, {q: (2 if q in tuning else 9) for q in ids})
    variants = tmp_path / "variants.yaml"
    variants.write_text("".join(f"{name}: |-\n  " + text.replace("\n", "\n  ") + "\n" for name, text in VARIANTS.items()))
    return path, variants, tuning, held


def aligned(server, tmp_path, variants, path, shots: str, resamples: str):
    """`calibrate --outputs PATH --align` with the scripted judge, the report in tmp_path/report."""
    server.chat = scripted
    return calibrate("--outputs", str(path), *judge_args(server), "--align", "--variants", str(variants), "--shots", shots,
                     "--out", "report", "--resamples", resamples, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})


def test_the_choice_reads_the_tuning_part_only_and_the_held_out_part_says_how_it_does(server, tmp_path, planted):
    path, variants, tuning, held = planted
    proc = aligned(server, tmp_path, variants, path, "0,2", "200")
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / "report" / "align.json").read_text())
    assert found["tuning"] == tuning and found["held_out"] == held and len(held) == 6
    assert found["chosen"] == "strict, 0 examples"  # fits the tuning labels; fewer examples win a tie
    agreement = {c["name"]: c["agreement"] for c in found["candidates"]}
    assert agreement["strict, 0 examples"] == 1.0 and agreement["configured, 0 examples"] < 0.5
    [held_out] = found["held_out_comparison"]
    assert held_out["best"] == "configured" and held_out["agreement"]["aligned"] < held_out["agreement"]["configured"]
    assert "Held-out part (6 rows, never read for the choice)" in proc.stdout
    # requests: 6 candidates on 14 tuning rows, then the chosen and the configured judge on the 6 held-out rows
    assert len(server.chat_requests()) == 6 * 14 + 2 * 6
    assert found["requests_planned"] == 6 * 14 + 2 * 6
    with_shots = [r for r in server.chat_requests() if "Examples that people scored" in prompt_text(r["body"])]
    assert with_shots and all(f"Quarry{int(q[1:])} " not in prompt_text(r["body"]).split("Examples that people scored")[1]
                              for r in with_shots for q in held)  # examples come from the tuning part only


def test_the_written_judge_runs_again_to_the_same_judgements(server, tmp_path, planted):
    path, variants, _, _ = planted
    proc = aligned(server, tmp_path, variants, path, "0", "50")
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "report" / "judge" / "aligned.yaml"
    assert "VARIANT-B" in written.read_text() and "sk-test" not in written.read_text()
    asked = len(server.chat_requests())
    again = run_app("--config-dir", str(tmp_path / "report"), "judge=aligned", "dataset=outputs", f"dataset.path={path}",
                    "embedder@scoring_embedder=hash", "tracker=none", f"cache.dir={tmp_path / 'fresh-cache'}",
                    f"hydra.run.dir={tmp_path / 'again'}", cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert again.returncode == 0, again.stderr
    assert len(server.chat_requests()) == asked + 20  # judged afresh, not from the cache
    rows = [json.loads(line) for line in (tmp_path / "again" / "questions.jsonl").read_text().splitlines()]
    assert {r["judge_scores"]["faithfulness"] for r in rows} == {2}  # the strict judge, as chosen


def test_the_plan_comes_first_and_a_plan_over_the_cap_sends_nothing(server, tmp_path, planted):
    path, variants, _, _ = planted
    server.chat = scripted
    dry = calibrate("--outputs", str(path), *judge_args(server), "--align", "--variants", str(variants), "--dry-run",
                    cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert dry.returncode == 0, dry.stderr
    assert "6 candidate judges" in dry.stdout and "up to 96 judge requests" in dry.stdout  # 3 variants x (0, 3 examples)
    capped = calibrate("--outputs", str(path), *judge_args(server), "--align", "--variants", str(variants),
                       "--max-requests", "50", cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert capped.returncode == 2 and "over --max-requests 50" in capped.stderr
    assert server.chat_requests() == []


def test_a_judge_without_a_system_prompt_and_bad_options_are_one_line(tmp_path, planted):
    path, variants, _, _ = planted
    offline = calibrate("--outputs", str(path), "embedder@scoring_embedder=hash", "--align", cwd=tmp_path, env={})
    assert offline.returncode == 2 and "has none (use judge=llm" in offline.stderr
    shots = calibrate("--outputs", str(path), "--align", "--shots", "two", cwd=tmp_path, env={})
    assert shots.returncode == 2 and "--shots: 'two' is not a list of numbers" in shots.stderr
    (tmp_path / "bad.yaml").write_text("- just a list\n")
    bad = calibrate("--outputs", str(path), "judge=llm", "--align", "--variants", str(tmp_path / "bad.yaml"), cwd=tmp_path,
                    env={})
    assert bad.returncode == 2 and "must map each variant's name to its system prompt" in bad.stderr


def test_examples_spread_across_the_labels_and_escape_the_templates_braces():
    labels = {f"q{i}": {"faithfulness": float(v)} for i, v in enumerate([1, 9, 5, 3, 7, 10])}
    assert examples(list(labels), labels, "faithfulness", 3, 0) == ["q0", "q2", "q5"]  # lowest, middle, highest
    assert examples(list(labels), labels, "faithfulness", 0, 0) == []
    assert with_examples("base {prompt}", [], labels) == "base {prompt}"
