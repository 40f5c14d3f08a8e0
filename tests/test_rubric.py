"""Rubric judges: criteria written as config, judged by the real local OpenAI-protocol server or
checked offline; hard replies read as scripted, failures and clamping counted, never scored."""
import json
import shutil
from pathlib import Path

import pytest

from openai_server import rubric_criteria, user_text
from ragexp.errors import QuestionFailed
from ragexp.judges.rubric import Rubric, RubricJudge
from ragexp.llm.session import LLMSession
from ragexp.types import Answer, Chunk, Hit, Question
from ragexp.validation import problems
from conftest import CONF, HASH, TEST_KEY_ENV, compose, llm_args, mlflow_runs, run_app
from ragexp.config.build import from_yaml

HITS = (Hit(Chunk("a#0", "a", "quarryd listens on port 7070. It was written in Go."), 0.9, 1),)
QUESTION = Question("q1", "Which port does quarryd listen on?", ("Port 7070.",), {"a": 1}, attributes={"channel": "chat"})
ANSWER = Answer("Port 7070 [Doc 1].")

FIVE = {
    "cites": {"instructions": "The answer cites its document.", "scale": "binary"},
    "grounded": {"instructions": "Every statement is supported.", "scale": ["unsupported", "partly", "mostly", "fully"]},
    "direct": {"instructions": "It answers the question asked.", "scale": "1-5"},
    "detail": {"instructions": "It gives the detail asked for.", "scale": "1-10"},
    "plain": {"instructions": "It uses plain words.", "scale": {"jargon": 0, "mixed": 0.5, "plain": 1}},
}


def connected(rubric: Rubric, server, tmp_path, **judge) -> tuple[RubricJudge, LLMSession]:
    endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="gpt-4o-mini", api_key_env=None, backoff_s=0.01, max_retries=0)
    rubric_judge = from_yaml("judge/rubric", rubric=rubric, endpoint=endpoint, **judge)
    llm = from_yaml("llm/default", cache_dir=str(tmp_path / "cache"))
    llm.connect(judge=rubric_judge)
    return rubric_judge, llm


@pytest.mark.parametrize("reply, scores", [
    # JSON in a code fence, prose around it, the reasoning before or after the score
    ('Here you go:\n```json\n{"cites": {"reasoning": "r", "score": "pass"}, "grounded": {"score": "mostly", "reasoning": "r"},'
     ' "direct": {"reasoning": "r", "score": 4}, "detail": {"score": 7}, "plain": {"score": "plain"}}\n```\nDone.',
     {"cites": 1, "grounded": 3, "direct": 4, "detail": 7, "plain": 1}),
    # trailing commas, scores as strings, levels by name in another case, bare values
    ('{"cites": {"score": "FAIL",}, "grounded": {"score": "Fully", "reasoning": "all there",}, "direct": "2",'
     ' "detail": {"score": "10"}, "plain": {"verdict": "Mixed"},}',
     {"cites": 0, "grounded": 4, "direct": 2, "detail": 10, "plain": 0.5}),
    # booleans for a binary criterion, a level by its value (a quoted object: tests/test_injection.py)
    ('The answer cites nothing. My verdict: {"cites": {"score": false}, "grounded": {"score": 1},'
     ' "direct": {"score": 5}, "detail": {"score": 1}, "plain": {"score": 0}}',
     {"cites": 0, "grounded": 1, "direct": 5, "detail": 1, "plain": 0}),
])
def test_hard_replies_read_as_scripted(server, tmp_path, reply, scores):
    server.chat = lambda body: reply
    judge, llm = connected(Rubric(FIVE, mode="single_call", name=None), server, tmp_path)
    judgement = judge.judge(QUESTION, HITS, ANSWER)
    assert judgement.scores == scores
    assert judgement.hallucination is None and "failed_criteria" not in judgement.details
    assert len(server.chat_requests()) == 1 and llm.stats()["judge_reasks"] == 0


def test_a_missing_criterion_is_asked_again_then_fails_alone_and_a_score_off_the_scale_is_clamped(server, tmp_path):
    replies = iter(['{"cites": {"score": "pass"}, "direct": {"score": 12}}',  # grounded missing; 12 on 1-5
                    '{"cites": {"score": "pass"}}'])  # the re-ask still misses it
    server.chat = lambda body: next(replies)
    two = {k: FIVE[k] for k in ("cites", "grounded", "direct")}
    judge, llm = connected(Rubric(two, mode="single_call", name=None), server, tmp_path)
    judgement = judge.judge(QUESTION, HITS, ANSWER)
    assert judgement.scores == {"cites": 1, "direct": 5}  # grounded is not scored as anything
    assert judgement.details["failed_criteria"] == {
        "grounded": "unreadable reply after a re-ask: no entry for criterion 'grounded'"}
    assert judgement.details["clamped"] == ["direct: 12 -> 5"]
    reask = server.chat_requests()[1]["body"]["messages"]
    assert [m["role"] for m in reask] == ["system", "user", "assistant", "user"]
    assert "no entry for criterion 'grounded'" in reask[-1]["content"]
    stats = llm.stats()
    assert (stats["judge_reasks"], stats["judge_failed_criteria"], stats["judge_clamped_values"]) == (1, 1, 1)


def test_a_reply_that_is_never_json_fails_the_question_with_the_reason(server, tmp_path):
    server.chat = lambda body: "I think the answer is fine."
    judge, llm = connected(Rubric({"cites": FIVE["cites"]}, mode="single_call", name=None), server, tmp_path)
    with pytest.raises(QuestionFailed, match="every criterion failed: cites: unreadable reply after a re-ask: no JSON object"):
        judge.judge(QUESTION, HITS, ANSWER)
    assert len(server.chat_requests()) == 2 and llm.stats()["judge_failed_criteria"] == 1


def test_single_call_asks_once_and_per_criterion_asks_each_at_once(server, tmp_path):
    judge, llm = connected(Rubric(FIVE, name="house", mode="single_call"), server, tmp_path)
    assert judge.name == "rubric-house-gpt-4o-mini"
    assert judge.judge(QUESTION, HITS, ANSWER).scores == {"cites": 1, "grounded": 4, "direct": 5, "detail": 10, "plain": 1}
    [sent] = server.chat_requests()
    assert set(rubric_criteria(sent["body"])) == set(FIVE)

    server.gather = 5  # the first requests wait until five are in flight together
    judge, llm = connected(Rubric(FIVE, mode="per_criterion", name=None), server, tmp_path / "b")
    assert judge.judge(QUESTION, HITS, Answer("Another answer.")).scores["detail"] == 10
    asked = server.chat_requests()[1:]
    assert sorted(name for r in asked for name in rubric_criteria(r["body"])) == sorted(FIVE)
    assert len(asked) == 5 and server.max_in_flight == 5


def test_the_prompt_holds_what_each_criterion_reads_between_tags(server, tmp_path):
    criteria = {"polite": {"instructions": "Polite for the channel.", "reads": ["answer", "channel"],
                           "examples": [{"answer": "Go away.", "verdict": "fail", "reasoning": "rude"}]}}
    judge, _ = connected(Rubric(criteria, mode="single_call", name=None), server, tmp_path)
    judge.judge(QUESTION, HITS, ANSWER)
    [sent] = server.chat_requests()
    system, user = (m["content"] for m in sent["body"]["messages"])
    assert "- polite: Polite for the channel." in system and 'Example 1: answer: Go away. -> "fail" (rude)' in system
    assert '<column name="channel">\nchat\n</column>' in user and "<generated_answer>\nPort 7070 [Doc 1].\n" in user
    assert "<question>" not in user and "<context>" not in user  # it reads neither


def test_deterministic_criteria_run_offline_and_a_python_one_gives_its_reason(tmp_path, monkeypatch):
    (tmp_path / "team_checks.py").write_text(
        "def short(question, contexts, answer, reference, row):\n"
        "    words = len(answer.split())\n"
        "    return (5 if words <= 5 else 1), f'{words} words'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rubric = Rubric({
        "cites": {"type": "regex", "instructions": "Cites [Doc N].", "pattern": r"\[Doc \d+\]"},
        "no_sorry": {"type": "contains", "instructions": "No apology.", "values": ["sorry"], "pass_if": "absent"},
        "is_json": {"type": "json_schema", "instructions": "A JSON object with a port.",
                    "schema": {"type": "object", "required": ["port"]}},
        "short": {"type": "python", "instructions": "At most 5 words.", "function": "team_checks:short", "scale": "1-5"},
    }, mode="single_call", name=None)
    judge = from_yaml("judge/rubric", rubric=rubric, endpoint=None)  # no endpoint: nothing is asked
    assert not judge.sends_requests and judge.concurrency == 1 and judge.name == "rubric"
    j = judge.judge(QUESTION, HITS, ANSWER)
    assert j.scores == {"cites": 1, "no_sorry": 1, "is_json": 0, "short": 5}
    assert j.details["short_reasoning"] == "4 words" and j.details["is_json_reasoning"].startswith("not JSON")
    j = judge.judge(QUESTION, HITS, Answer('{"port": 7070, "note": "sorry for the wait"}'))
    assert j.scores == {"cites": 0, "no_sorry": 0, "is_json": 1, "short": 1}


@pytest.mark.parametrize("override, message", [
    ("rubric.criteria.cites.instructions=''", "rubric.criteria.cites.instructions: missing"),
    ("rubric.criteria.grounded.scale=1-7", "rubric.criteria.grounded.scale: unknown scale '1-7'"),
    ("+rubric.criteria.Cites={instructions:x}", "rubric.criteria: two criteria have the same name but for case"),
    ("+rubric.criteria.faithfulness={instructions:x}", "rubric.criteria.faithfulness: 'faithfulness' is a built-in metric's name"),
    ("rubric.criteria.cites.pattern='(unclosed'", "rubric.criteria.cites.pattern: does not compile"),
    ("+rubric.criteria.mine={type:python,instructions:x,function:'no_such_module:check'}",
     "rubric.criteria.mine.function: cannot import 'no_such_module:check'"),
    ("rubric.criteria.cites.weight=0.5", "rubric.criteria: the weights cites=0.5 + grounded=0.5 + answers_question=0.3 = 1.3"),
    ("rubric.criteria.grounded.examples=[{answer:x,verdict:perfect}]",
     "rubric.criteria.grounded.examples[0].verdict: 'perfect' is not one of"),
    ("rubric.criteria.grounded.target=9", "rubric.criteria.grounded.target: warning 9 <= good 9 must lie on the scale 1-4"),
])
def test_bad_rubrics_are_named_before_any_work(override, message):
    found = problems(compose("judge=rubric", "rubric=grounding", override))
    assert any(line.startswith(message) for line in found), found


def test_a_bad_rubric_is_one_line_and_exit_2_on_the_command_line(tmp_path):
    done = run_app("judge=rubric", "rubric=style", "rubric.criteria.no_headings.pattern='('", "tracker=none", *HASH, cwd=tmp_path)
    assert done.returncode == 2
    assert "rubric.criteria.no_headings.pattern: does not compile" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "outputs").exists() or not list((tmp_path / "outputs").rglob("results.json"))


def test_an_llm_criterion_without_an_endpoint_is_refused_naming_it(tmp_path):
    done = run_app("rubric=grounding", "tracker=none", *HASH, cwd=tmp_path)  # beside judge=offline: no endpoint
    assert done.returncode == 2
    assert "rubric.criteria.grounded: an LLM criterion needs an endpoint" in done.stderr


def rubric_args(server, *extra: str) -> list[str]:
    return [*llm_args(server, judge="rubric", generator=False), "tracker=none", "dataset.limit=4", *extra]


def results(folder) -> dict:
    """The aggregates of the one run under `folder` (results.json: run name -> aggregates)."""
    [path] = list(folder.rglob("results.json"))
    [aggregates] = json.loads(path.read_text()).values()
    return aggregates


def test_judge_rubric_runs_with_its_overall_score_as_the_weighted_mean_on_0_1(server, tmp_path):
    verdicts = {"cites": "pass", "grounded": "partly", "answers_question": 4}
    server.chat = lambda body: json.dumps({n: {"reasoning": "r", "score": verdicts[n]} for n in rubric_criteria(body)})
    done = run_app(*rubric_args(server), cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert done.returncode == 0, done.stderr
    aggregates = results(tmp_path)
    assert "hallucination_rate" not in aggregates and "n_hallucination_rate" not in aggregates
    assert aggregates["avg_grounded"] == 2 and aggregates["avg_answers_question"] == 4
    cites = aggregates["avg_cites"]  # the extractive answers carry no [Doc N]: checked offline, 0
    assert cites == 0
    # grounding.yaml: cites 0.2, grounded 0.5 (2 on 1-4: 1/3), answers_question 0.3 (4 on 1-5: 3/4)
    assert aggregates["overall_score"] == pytest.approx(0.2 * 0 + 0.5 * (1 / 3) + 0.3 * 0.75, abs=1e-4)
    assert aggregates["llm_requests"] == 4  # one per question: the regex criterion asks nothing
    assert "avg_grounded" in done.stdout and "warning" in done.stdout.split("avg_grounded")[1].splitlines()[0]


def work(folder) -> dict:
    [path] = list(folder.rglob("run.json"))
    return json.loads(path.read_text())["work"]


def test_a_rubric_beside_the_llm_judge_leaves_its_requests_scores_and_cache_hits_as_they_are(server, tmp_path):
    base = [*llm_args(server, judge="llm", generator=False), "tracker=none", "dataset.limit=4"]
    env = {TEST_KEY_ENV: "k"}
    assert run_app(*base, cwd=tmp_path, env=env).returncode == 0
    alone = results(tmp_path)
    judge_prompts = [r for r in server.chat_requests() if not rubric_criteria(r["body"])]
    shutil.rmtree(tmp_path / "outputs")

    done = run_app(*base, "rubric=refusal", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    beside = results(tmp_path)
    for key in ("avg_context_relevance", "avg_answer_similarity", "avg_faithfulness", "hallucination_rate", "overall_score"):
        assert beside[key] == alone[key], key
    assert work(tmp_path)["judgements_cached"] == 4  # the judge's four, from the stage cache
    assert beside["avg_refuses_when_unsupported"] == 1 and beside["avg_no_dosage_advice"] == 1
    assert beside["avg_no_apology_boilerplate"] == 1  # deterministic: the extractive answers do not apologise
    later = server.chat_requests()[len(judge_prompts):]
    assert len(later) == 8 and all(len(rubric_criteria(r["body"])) == 1 for r in later)  # per_criterion: 2 a question
    assert beside["rubric_input_tokens"] > 0 and beside["judge_input_tokens"] == 0  # the judge asked nothing anew


def test_the_stage_cache_keys_a_rubric_by_its_text(tmp_path):
    args = ["judge=rubric", "rubric=style", "~rubric.criteria.same_language", "~rubric.criteria.plain_words",
            "tracker=none", "retriever=bm25", "dataset.limit=3", *HASH]
    assert run_app(*args, cwd=tmp_path).returncode == 0
    assert run_app(*args, cwd=tmp_path).returncode == 0
    runs = sorted(tmp_path.rglob("run.json"))
    assert json.loads(runs[-1].read_text())["work"]["judgements_cached"] == 3
    changed = run_app(*args, "rubric.criteria.no_headings.instructions=No heading at all.", cwd=tmp_path)
    assert changed.returncode == 0
    last = max(tmp_path.rglob("run.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(last.read_text())["work"]["judgements_computed"] == 3


def test_a_judgement_with_a_failed_criterion_is_asked_again_on_the_next_run(server, tmp_path):
    verdicts = iter(["not json"] * 2 + [json.dumps({"grounded": {"score": "fully"}})] * 100)
    server.chat = lambda body: next(verdicts)
    args = rubric_args(server, "dataset.limit=1", "~rubric.criteria.answers_question", "rubric.criteria.cites.weight=0.5",
                       "rubric.criteria.grounded.weight=0.5")
    env = {TEST_KEY_ENV: "k"}
    first = run_app(*args, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr  # cites (offline) judged it: the question stands
    assert results(tmp_path)["judge_failed_criteria"] == 1 and "avg_grounded" not in results(tmp_path)
    shutil.rmtree(tmp_path / "outputs")
    again = run_app(*args, cwd=tmp_path, env=env)
    assert again.returncode == 0 and results(tmp_path)["avg_grounded"] == 4
    assert work(tmp_path)["judgements_computed"] == 1


def test_a_dry_run_counts_a_rubrics_requests(server, tmp_path):
    done = run_app(*rubric_args(server, "rubric=refusal", "dry_run=true"), cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert done.returncode == 0, done.stderr
    assert "8 requests" in done.stdout.replace(",", "")  # 4 questions x 2 LLM criteria (per_criterion)
    assert server.chat_requests() == []


def test_the_reply_is_asked_for_with_its_json_schema_then_json_mode_where_that_is_refused(server, tmp_path):
    judge, _ = connected(Rubric({k: FIVE[k] for k in ("cites", "direct")}, mode="single_call", name=None), server, tmp_path)
    judge.judge(QUESTION, HITS, ANSWER)
    [sent] = server.chat_requests()
    form = sent["body"]["response_format"]
    assert form["type"] == "json_schema"
    schema = form["json_schema"]["schema"]
    assert schema["required"] == ["cites", "direct"]
    assert schema["properties"]["cites"]["properties"]["score"] == {"type": "string", "enum": ["fail", "pass"]}
    assert schema["properties"]["direct"]["properties"]["score"] == {"type": "integer", "minimum": 1, "maximum": 5}

    server.reject_json_schema = True  # an endpoint that takes JSON mode but no schema: json_object from then on
    judge, _ = connected(Rubric({"cites": FIVE["cites"]}, mode="single_call", name=None), server, tmp_path / "b")
    assert judge.judge(QUESTION, HITS, Answer("Another.")).scores == {"cites": 1}
    forms = [r["body"].get("response_format", {}).get("type") for r in server.chat_requests()[1:]]
    assert forms == ["json_schema", "json_object"]


def test_calibrate_reads_a_rubric_runs_criteria_on_their_scales(server, tmp_path):
    from ragexp.calibrate.__main__ import main as calibrate

    levels = ["unsupported", "partly", "mostly", "fully"]
    server.chat = lambda body: json.dumps({"grounded": {"reasoning": "r", "score": levels[len(user_text(body)) % 4]}})
    args = rubric_args(server, "~rubric.criteria.answers_question", "~rubric.criteria.cites", "~rubric.criteria.grounded.weight")
    assert run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "k"}).returncode == 0
    [folder] = [p.parent for p in tmp_path.rglob("questions.json")]
    table = json.loads((folder / "questions.json").read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    people = [r["grounded"] for r in rows]
    people[0] = 1 + (people[0] % 4)  # one question labelled a level apart (4 -> 1 or up by one)
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,grounded\n" + "".join(f"{r['question_id']},{p:g}\n" for r, p in zip(rows, people)))
    out = tmp_path / "report"
    assert calibrate([str(folder), "--labels", str(labels), "--out", str(out), "--resamples", "100", "--no-log"]) == 0
    [row] = json.loads((out / "calibration.json").read_text())["metrics"]
    assert row["metric"] == "grounded" and row["questions"] == 4
    assert row["mae"] == pytest.approx(abs(people[0] - rows[0]["grounded"]) / 4)
    assert "| grounded | 1-4 (ordinal) | 4 | 1 |" in (out / "calibration.md").read_text()  # alpha's level: its points


def test_calibrate_says_which_variant_of_a_criterion_agrees_best_and_when_it_cannot_tell(server, tmp_path):
    from ragexp.calibrate.__main__ import main as calibrate

    levels = ["unsupported", "partly", "mostly", "fully"]

    def chat(body):  # variant "PRECISE" gives what people give, "LOOSE" always fully
        people = len(user_text(body)) % 4
        return json.dumps({"grounded": {"reasoning": "r", "score": levels[people if "PRECISE" in str(body) else 3]}})
    server.chat = chat
    args = rubric_args(server, "~rubric.criteria.answers_question", "~rubric.criteria.cites", "~rubric.criteria.grounded.weight", "dataset.limit=12")
    swept = run_app("-m", *args, "rubric.criteria.grounded.instructions=PRECISE,LOOSE,PRECISE again",
                    cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert swept.returncode == 0, swept.stderr
    folders = sorted(p.parent for p in tmp_path.rglob("multirun/*/*/*/questions.json"))
    assert len(folders) == 3
    table = json.loads((folders[0] / "questions.json").read_text())
    rows = [dict(zip(table["columns"], row)) for row in table["data"]]
    labels = tmp_path / "labels.csv"
    labels.write_text("question_id,grounded\n" + "".join(f"{r['question_id']},{r['grounded']:g}\n" for r in rows))
    out = tmp_path / "report"
    assert calibrate([*map(str, folders), "--labels", str(labels), "--out", str(out), "--resamples", "500"]) == 0
    [variants] = json.loads((out / "calibration.json").read_text())["variants"]
    precise, loose, again = map(str, folders)
    assert variants["best"] == precise and variants["agreement"][precise] == 1.0 and variants["agreement"][loose] < 1.0
    verdicts = {v["other"]: v["verdict"] for v in variants["versus"]}
    assert verdicts == {loose: "agrees better", again: "cannot tell"}
    assert "cannot tell" in (out / "calibration.md").read_text()


def test_the_monitor_judges_its_windows_with_a_rubric(tmp_path, server, monkeypatch):
    from hydra import compose as hydra_compose, initialize_config_dir

    from ragexp.monitor.app import monitor
    from ragexp.monitor.synthetic import generate

    log = generate(tmp_path / "log.jsonl", 60, span="2d", seed=1)
    monkeypatch.setenv(TEST_KEY_ENV, "k")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra_compose(config_name="monitor", overrides=[
            "embedder@scoring_embedder=hash", f"cache.dir={tmp_path / 'cache'}", f"monitor.input={log}",
            "monitor.judge_sample=3", "tracker=none", "judge=rubric", "rubric=refusal",
            f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}"])
    assert monitor(cfg, tmp_path / "out") == 0
    assert len(server.chat_requests()) == 12  # 3 records x 2 windows x 2 LLM criteria (per_criterion)
    for window in json.loads((tmp_path / "out" / "windows.json").read_text())["windows"]:
        m = window["metrics"]
        assert m["avg_refuses_when_unsupported"] == 1 and m["avg_no_dosage_advice"] == 1
        assert "avg_no_apology_boilerplate" in m and "hallucination_rate" not in m


def test_ragexp_evaluate_judges_recorded_outputs_with_a_rubric(tmp_path, monkeypatch):
    import ragexp

    monkeypatch.chdir(tmp_path)
    rows = [{"question": "Which port?", "contexts": ["quarryd listens on port 7070."], "answer": "Port 7070 [Doc 1].",
             "channel": "chat"},
            {"question": "Which port?", "contexts": ["quarryd listens on port 7070."], "answer": "I'm sorry, I do not know.",
             "channel": "email"}]
    done = ragexp.evaluate(rows, judge="rubric", overrides=[
        "rubric=refusal", "~rubric.criteria.refuses_when_unsupported", "~rubric.criteria.no_dosage_advice",
        "+rubric.criteria.from_chat={type:contains,instructions:'Came by chat.',values:[chat],reads:[channel]}"])
    assert done.aggregates["avg_no_apology_boilerplate"] == 0.5 and "hallucination_rate" not in done.aggregates
    assert done.table["from_chat"].tolist() == [1.0, 0.0]  # read from the rows' own column


OFFLINE_RUBRIC = """_target_: ragexp.judges.rubric.Rubric
name: offline
mode: single_call
criteria:
  names_a_number:
    type: regex
    instructions: The answer gives a number.
    pattern: '\\\\d'
    target: 0.8
"""


def test_a_race_and_the_gate_take_a_rubrics_criteria_beside_the_offline_judge(tmp_path):
    (tmp_path / "conf" / "rubric").mkdir(parents=True)
    (tmp_path / "conf" / "rubric" / "offline.yaml").write_text(OFFLINE_RUBRIC)
    conf = ["--config-dir", str(tmp_path / "conf"), "rubric=offline", "retriever=bm25", *HASH, "tracker=none"]
    race = run_app("-m", *conf, "hydra/sweeper=racing", "retriever.top_k=1,5", "hydra.sweeper.min_questions=10",
                   "hydra.sweeper.objective=avg_names_a_number", cwd=tmp_path)
    assert race.returncode == 0, race.stderr[-3000:]
    [state] = [json.loads(p.read_text()) for p in tmp_path.glob("multirun/*/*/racing.json")]
    jobs = [j for r in state["rounds"] for j in r["jobs"]]
    assert len(jobs) >= 2
    for job in jobs:  # each job scored the criterion beside the offline judge's own metrics
        [values] = json.loads((Path(job["folder"]) / "results.json").read_text()).values()
        assert "avg_names_a_number" in values and "avg_faithfulness" in values

    plus = [("+rubric=offline" if a == "rubric=offline" else a) for a in conf]  # the spelling of an added group works too
    gated = run_app(*plus, "dataset.limit=5", "+gate.thresholds.names_a_number.min=1.01", cwd=tmp_path)
    assert gated.returncode == 3 and "avg_names_a_number = " in gated.stderr  # a share cannot pass 1.01


def test_repeats_judge_each_question_again_and_log_the_criteria_spread(server, tmp_path):
    answers = iter(["fully", "partly"] * 100)  # the two repeats of a question disagree
    server.chat = lambda body: json.dumps({"grounded": {"reasoning": "r", "score": next(answers)}})
    args = rubric_args(server, "~rubric.criteria.answers_question", "~rubric.criteria.cites", "~rubric.criteria.grounded.weight",
                       "judge.repeats=2", "dataset.limit=1", "llm.cache_dir=null")
    done = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert done.returncode == 0, done.stderr
    aggregates = results(tmp_path)
    assert aggregates["llm_requests"] == 2 and aggregates["avg_grounded"] == 3  # (4 + 2) / 2
    assert aggregates["avg_grounded_std"] > 0 and "hallucination_rate" not in aggregates


def test_mlflow_gets_the_criteria_as_metrics_and_their_reasoning_in_the_table(tmp_path):
    (tmp_path / "conf" / "rubric").mkdir(parents=True)
    (tmp_path / "conf" / "rubric" / "offline.yaml").write_text(OFFLINE_RUBRIC)
    done = run_app("--config-dir", str(tmp_path / "conf"), "judge=rubric", "rubric=offline", "retriever=bm25", *HASH,
                   "dataset.limit=3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    client, [run] = mlflow_runs(tmp_path)
    assert "avg_names_a_number" in run.data.metrics and run.data.tags["judge"] == "rubric-offline"
    table = client.load_table(run.info.experiment_id, "questions.json", run_ids=[run.info.run_id])
    assert {"names_a_number", "names_a_number_reasoning"} <= set(table.columns)
    assert all(r.startswith(("matches at", "no match for")) for r in table["names_a_number_reasoning"])
