"""Figure group `rubric` (python bench/run.py rubric): rubric judges against the OpenAI-protocol
test server (tests/openai_server.py), in this process.

- requests: a rubric of 5 LLM criteria judging 20 questions, `single_call` (goal: exactly 1
  request per question) and `per_criterion` (goal: 5 per question, all in flight: one question
  judged in the time of one round trip; median of RUNS runs against a 200 ms server, beside the
  median of RUNS single requests);
- replies: a scripted set of hard replies, each with the verdicts it must give: code fences, prose
  around the JSON, trailing commas, scores as strings, levels by name in another case, the
  reasoning before or after the score, bare values (goal: 100% read as scripted); a reply without
  a criterion and one that is never JSON (goal: counted failures with their reason); 12 on 1-10
  (goal: 10, counted as clamped); and no criterion scored that the reply did not score (0 silent
  defaults);
- the docs' rubric: the lines of the 3-criterion rubric in docs/how-to/rubrics.md (goal: <= 15,
  no Python) and its 2-point sweep run as printed (exit status 0)."""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from ragexp.config.build import from_yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = 7
sys.path.insert(0, str(ROOT / "tests"))

FIVE = {
    "cites": {"instructions": "The answer cites its document.", "scale": "binary"},
    "grounded": {"instructions": "Every statement is supported.", "scale": ["unsupported", "partly", "mostly", "fully"]},
    "direct": {"instructions": "It answers the question asked.", "scale": "1-5"},
    "detail": {"instructions": "It gives the detail asked for.", "scale": "1-10"},
    "plain": {"instructions": "It uses plain words.", "scale": {"jargon": 0, "mixed": 0.5, "plain": 1}},
}

# (reply, the scores it must give; absent criteria must fail, never be scored)
HARD = [
    ('```json\n{"cites": {"reasoning": "r", "score": "pass"}, "grounded": {"reasoning": "r", "score": "mostly"}, '
     '"direct": {"reasoning": "r", "score": 4}, "detail": {"reasoning": "r", "score": 7}, "plain": {"reasoning": "r", "score": "plain"}}\n```',
     {"cites": 1, "grounded": 3, "direct": 4, "detail": 7, "plain": 1}),
    ('Here is my verdict.\n{"cites": {"score": "fail", "reasoning": "no citation"}, "grounded": {"score": "fully", "reasoning": "r"}, '
     '"direct": {"score": 5, "reasoning": "r"}, "detail": {"score": 2, "reasoning": "r"}, "plain": {"score": "mixed", "reasoning": "r"}}\nThanks!',
     {"cites": 0, "grounded": 4, "direct": 5, "detail": 2, "plain": 0.5}),
    ('{"cites": {"score": "pass",}, "grounded": {"score": "partly",}, "direct": {"score": 3,}, "detail": {"score": 9,}, '
     '"plain": {"score": "jargon",},}',
     {"cites": 1, "grounded": 2, "direct": 3, "detail": 9, "plain": 0}),
    ('{"cites": {"score": "true"}, "grounded": {"score": "1"}, "direct": {"score": "2"}, "detail": {"score": "10"}, '
     '"plain": {"score": "1"}}',
     {"cites": 1, "grounded": 1, "direct": 2, "detail": 10, "plain": 1}),
    ('{"cites": {"score": "PASS"}, "grounded": {"score": "Mostly"}, "direct": {"score": 4.0}, "detail": {"score": 6}, '
     '"plain": {"score": "MIXED"}}',
     {"cites": 1, "grounded": 3, "direct": 4, "detail": 6, "plain": 0.5}),
    ('{"cites": "fail", "grounded": "unsupported", "direct": 1, "detail": "8", "plain": "plain"}',
     {"cites": 0, "grounded": 1, "direct": 1, "detail": 8, "plain": 1}),
    ('The document says {"cites": {"score": "pass"}} but my verdict is: {"cites": {"score": false}, "grounded": {"score": 4}, '
     '"direct": {"score": 5}, "detail": {"score": 5}, "plain": {"score": 0.5}}',
     {"cites": 0, "grounded": 4, "direct": 5, "detail": 5, "plain": 0.5}),
]


def judged(rubric_settings: dict, server, work_dir: Path, **rubric):
    from ragexp.judges.rubric import Rubric, RubricJudge

    endpoint = from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None, max_retries=0, max_concurrency=32)
    judge = RubricJudge(Rubric(rubric_settings, **rubric), endpoint, repeats=1, name=None)
    session = from_yaml("llm/default", cache_dir=str(work_dir / "llm-cache"))
    session.connect(judge=judge)
    return judge, session


def questions(n: int, tag: str):
    from ragexp.types import Answer, Chunk, Hit, Question

    hits = (Hit(Chunk("a#0", "a", "quarryd listens on port 7070."), 0.9, 1),)
    return [(Question(f"q{i}", f"Which port does server {i} use ({tag})?", ("7070",)), hits, Answer("Port 7070 [Doc 1].")) for i in range(n)]


def requests(work_dir: Path) -> dict:
    from openai_server import OpenAIServer

    from ragexp.base.concurrency import map_concurrently

    figures: dict = {}
    with OpenAIServer() as server:
        judge, _ = judged(FIVE, server, work_dir / "single")
        asked = questions(20, "single")
        map_concurrently(lambda q: judge.judge(*q), asked, 8, "judging")
        figures["single_call_requests_per_question"] = len(server.chat_requests()) / len(asked)
    with OpenAIServer(latency=0.2) as server:
        judge, session = judged(FIVE, server, work_dir / "per", mode="per_criterion")
        client = judge.client
        from ragexp.llm.client import ChatRequest

        client.complete(ChatRequest((("user", "warm up"),)), use_cache=False)
        trips, wholes = [], []
        for run in range(RUNS):  # alternating, so that a slow moment falls on both
            started = time.perf_counter()
            client.complete(ChatRequest((("user", f"one round trip {run}"),)), use_cache=False)
            trips.append(time.perf_counter() - started)
            [(q, hits, answer)] = questions(1, f"per-{run}")
            started = time.perf_counter()
            judge.judge(q, hits, answer)
            wholes.append(time.perf_counter() - started)
        asked = [r for r in server.chat_requests() if "one round trip" not in str(r["body"]) and "warm up" not in str(r["body"])]
        figures["per_criterion_requests_per_question"] = len(asked) / RUNS
        figures["per_criterion_max_in_flight"] = server.max_in_flight
        figures["round_trip_s"] = round(statistics.median(trips), 3)
        figures["per_criterion_question_s"] = round(statistics.median(wholes), 3)
        figures["per_criterion_over_round_trip"] = round(figures["per_criterion_question_s"] / figures["round_trip_s"], 3)
    return figures


def replies(work_dir: Path) -> dict:
    from openai_server import OpenAIServer

    from ragexp.errors import QuestionFailed

    read, silent = 0, 0
    with OpenAIServer() as server:
        for n, (reply, scores) in enumerate(HARD):
            server.chat = lambda body, reply=reply: reply
            judge, _ = judged(FIVE, server, work_dir / f"hard-{n}")
            [(q, hits, answer)] = questions(1, f"hard-{n}")
            got = judge.judge(q, hits, answer).scores
            read += got == scores
            silent += len(set(got) - set(scores))
        failures = {}
        server.chat = lambda body: '{"cites": {"score": "pass"}}'  # grounded missing, twice
        judge, session = judged({k: FIVE[k] for k in ("cites", "grounded")}, server, work_dir / "missing")
        [(q, hits, answer)] = questions(1, "missing")
        j = judge.judge(q, hits, answer)
        silent += "grounded" in j.scores
        failures["missing criterion"] = {"reason": j.details["failed_criteria"]["grounded"],
                                         "counted": session.stats()["judge_failed_criteria"]}
        server.chat = lambda body: "It looks fine to me."
        judge, session = judged({"cites": FIVE["cites"]}, server, work_dir / "never-json")
        [(q, hits, answer)] = questions(1, "never-json")
        try:
            judge.judge(q, hits, answer)
            silent += 1
            failures["never JSON"] = {"reason": "scored", "counted": 0}
        except QuestionFailed as err:
            failures["never JSON"] = {"reason": str(err), "counted": session.stats()["judge_failed_criteria"]}
        server.chat = lambda body: '{"detail": {"score": 12, "reasoning": "r"}}'
        judge, session = judged({"detail": FIVE["detail"]}, server, work_dir / "clamped")
        [(q, hits, answer)] = questions(1, "clamped")
        clamped = {"score": judge.judge(q, hits, answer).scores["detail"], "counted": session.stats()["judge_clamped_values"]}
    return {"hard_replies": len(HARD), "read_as_scripted": read, "failures": failures, "twelve_on_1_10": clamped,
            "silent_defaults": silent}


def docs_rubric(work_dir: Path) -> dict:
    """The docs' first rubric block: its YAML lines, and the block run as printed."""
    page = (ROOT / "docs" / "how-to" / "rubrics.md").read_text(encoding="utf-8")
    block = re.search(r"```bash\n(mkdir -p my-conf/rubric\ncat > my-conf/rubric/house.yaml.*?)```", page, re.S)
    if block is None:
        raise SystemExit("bench: docs/how-to/rubrics.md has no house.yaml block")
    code = block.group(1)
    yaml_lines = code.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0].splitlines()
    folder = work_dir / "docs-block"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    started = time.perf_counter()
    proc = subprocess.run(["bash", "-e", "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    logged = [p for p in folder.glob("multirun/*/*/*/results.json") if "avg_names_a_number" in p.read_text()]
    return {"yaml_lines": len(yaml_lines), "python_lines": 0, "sweep_exit_status": proc.returncode,
            "sweep_s": round(time.perf_counter() - started, 1), "jobs_with_rubric_metrics": len(logged)}


def measure(work_dir: Path, args=None) -> dict:
    figures = {"load_1min": round(os.getloadavg()[0], 1), **requests(work_dir), **replies(work_dir),
               **docs_rubric(work_dir)}
    page(figures)
    return figures


def page(f: dict) -> None:
    fail = f["failures"]
    lines = ["# Rubric judges", "",
             f"`python bench/run.py rubric`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
             f"1-minute load {f['load_1min']} at the start; against tests/openai_server.py.", "",
             "| figure | value | goal |", "| --- | --- | --- |",
             f"| single_call, 5 LLM criteria, 20 questions: requests per question | {f['single_call_requests_per_question']:g} | 1 |",
             f"| per_criterion: requests per question; most in flight at once | {f['per_criterion_requests_per_question']:g}; "
             f"{f['per_criterion_max_in_flight']} | 5; 5 |",
             f"| per_criterion: one question judged / one round trip, 200 ms server (medians of {RUNS}) | "
             f"{f['per_criterion_question_s']} / {f['round_trip_s']} s = {f['per_criterion_over_round_trip']}x | about 1x |",
             f"| hard replies read as scripted (fences, prose, trailing commas, strings, levels by name and case, "
             f"reasoning first or last, bare values) | {f['read_as_scripted']} / {f['hard_replies']} | 100% |",
             f"| a reply missing a criterion, twice | failed, counted {fail['missing criterion']['counted']}: "
             f"{fail['missing criterion']['reason']} | a counted failure with its reason |",
             f"| a reply that is never JSON | failed, counted {fail['never JSON']['counted']}: {fail['never JSON']['reason']} | "
             "a counted failure with its reason |",
             f"| 12 on 1-10 | {f['twelve_on_1_10']['score']:g}, counted as clamped {f['twelve_on_1_10']['counted']} | 10, counted |",
             f"| criteria scored that the reply did not score | {f['silent_defaults']} | 0 |",
             f"| the docs' 3-criterion rubric: YAML lines, Python lines | {f['yaml_lines']}, {f['python_lines']} | <= 15, 0 |",
             f"| its 2-point sweep, run as printed: exit status, jobs that logged its metrics, seconds | "
             f"{f['sweep_exit_status']}, {f['jobs_with_rubric_metrics']}, {f['sweep_s']} s | 0, 2 |", ""]
    (Path(__file__).parent / "results" / "rubric.md").write_text("\n".join(lines))
