"""Figure group `cascade_sweep` (`python bench/run.py cascade_sweep`): judge=cascade across a sweep
with a planted winner. 24 systems under test answer the same HotpotQA dev500 questions (the
question's first 5 paragraphs as contexts; a right answer is the reference said in a sentence, in
each system's own words, and a supporting sentence reworded; a wrong one another question's answer
and a non-supporting sentence reworded: no two systems give one answer, so no judgement is
shared). System 13 answers 90% right, the others 45-72%, each question's fate a seeded draw. The
systems are one Python function (`system=python system.function=cascade_sweep:answer`), the sweep
is over its `system.params.system`, and the questions are a recorded-outputs file of questions and
references.

Three sweeps of the same grid, each with its own fresh stage cache and test server (the LLM judge
against tests/openai_server.py at 200 ms, replies scripted from word overlaps: bench/racing.py's
`scripted_judge`, the planted verdicts), the offline judge with the hash embedder as the cheap one:
- the full grid with judge=llm (every question of every system: the reference leaderboard);
- the full grid with judge=cascade at a 10% sample (judge.expensive = that LLM judge);
- the same cascade under hydra/sweeper=racing (default rounds).
Per sweep: LLM requests the server received, wall time, the winner and whether the leaderboard
separates it from the runner-up (the Holm-corrected paired test: `worse`). Goal: the cascade names
the full LLM grid's winner, separated; with racing, the same winner with <= 5% of the full grid's
LLM requests."""
from __future__ import annotations

import functools
import json
import os
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cheap_judge import HOTPOT, reworded  # noqa: E402
from racing import folders, full_grid_leaderboard, ragexp, scripted_judge  # noqa: E402

SYSTEMS, WINNER = 24, 13
LATENCY = 0.2
BASE = ["dataset=outputs", "system=python", "system.function=cascade_sweep:answer", "system.concurrency=4",
        "embedder@scoring_embedder=hash", "tracker=none"]
LLM = ["judge.endpoint.api_key_env=null", "judge.endpoint.max_concurrency=16"]
CASCADE = ["judge=cascade", "judge.sample=0.1", "judge.expensive.endpoint.api_key_env=null",
           "judge.expensive.endpoint.max_concurrency=16"]


def accuracy(system: int) -> float:
    """The planted share of right answers: 0.9 for the winner, 0.45-0.72 for the others."""
    others = [s for s in range(SYSTEMS) if s != WINNER]
    return 0.9 if system == WINNER else 0.45 + 0.27 * others.index(system) / (len(others) - 1)


OPENINGS = ("The answer is", "It is", "Answer:", "That would be", "In short,", "The documents say")
CLOSINGS = (".", ", per the context.", ", as the sources say.", " (from the passages).")


def said(system: int, span: str) -> str:
    """The answer in system `system`'s own words: no two systems say it alike (no judgement shared)."""
    return f"{OPENINGS[system % len(OPENINGS)]} {span}{CLOSINGS[system // len(OPENINGS) % len(CLOSINGS)]} "


def first_sentence(text: str) -> str:
    return text.split(".  ")[0].split(". ")[0].rstrip(".") + "."


def system_answers(questions: list[dict], system: int) -> dict[str, dict]:
    """System `system`'s reply to each question (by its text): the answer and the 5 contexts."""
    draw = random.Random(f"system-{system}")
    replies = {}
    for n, q in enumerate(questions):
        contexts = q["contexts"][:5]
        supporting = [c for c in contexts if c.get("is_supporting")] or contexts
        others = [c for c in contexts if c not in supporting] or contexts
        span = q["answers_objects"][0]["spans"][0]
        if draw.random() < accuracy(system):
            answer = said(system, span) + reworded(first_sentence(supporting[0]["paragraph_text"]))
        else:
            wrong = questions[(n + 1 + system) % len(questions)]["answers_objects"][0]["spans"][0]
            answer = said(system, wrong) + reworded(first_sentence(others[-1]["paragraph_text"]))
        replies[q["question_text"]] = {"answer": answer, "contexts": [
            {"text": c["paragraph_text"], "doc_id": c["title"]} for c in contexts]}
    return replies


def write_data(work_dir: Path, count: int) -> tuple[Path, Path]:
    """The questions file (id, question, reference) and every system's replies (answers.json)."""
    questions = [json.loads(line) for line in HOTPOT.read_text().splitlines()[:count]]
    rows = [{"id": q["question_id"], "question": q["question_text"], "reference": [q["answers_objects"][0]["spans"][0]]}
            for q in questions]
    (work_dir / "questions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work_dir / "answers.json").write_text(json.dumps({str(s): system_answers(questions, s) for s in range(SYSTEMS)}))
    return work_dir / "questions.jsonl", work_dir / "answers.json"


@functools.cache
def replies(path: str) -> dict:
    return json.loads(Path(path).read_text())


def answer(question: str, params: dict) -> dict:
    """The system under test (system=python): system `params["system"]`'s reply, from `params["answers"]`."""
    return replies(params["answers"])[str(params["system"])][question]


def system_number(text: str) -> int:
    """The system named in `text` (an override, a leaderboard label)."""
    return int(re.search(r"system.params.system=(\d+)", text).group(1))


def system_of(folder) -> int:
    """The system a job judged, from its run folder's overrides."""
    return system_number((Path(folder) / ".hydra" / "overrides.yaml").read_text())


def sweep(work_dir: Path, name: str, data: tuple[Path, Path], judge: list[str], racing: bool) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    sweep_dir = work_dir / name
    args = ["-m", *(["hydra/sweeper=racing"] if racing else []), f"dataset.path={data[0]}", *BASE,
            f"system.params.answers={data[1]}", "system.params.system=" + ",".join(map(str, range(SYSTEMS))),
            *judge, f"cache.dir={work_dir / (name + '-cache')}", f"hydra.sweep.dir={sweep_dir}"]
    load = os.getloadavg()[0]
    with OpenAIServer(latency=LATENCY, chat=scripted_judge) as server:
        key = "judge.expensive.endpoint.base_url" if "judge=cascade" in judge else "judge.endpoint.base_url"
        seconds, _ = ragexp([*args, f"{key}={server.base_url}"], work_dir, path=(ROOT / "bench",))
        requests = len(server.chat_requests())
    result = {"wall_s": round(seconds, 1), "load_1min_before": round(load, 1), "llm_requests": requests}
    if racing:
        race = json.loads((sweep_dir / "report" / "race.json").read_text())
        last = race["rounds"][-1]
        best = next(d for d in last["decisions"] if d["rank"] == 1)
        folder = next(Path(j["folder"]) for j in last["jobs"] if j["config"] == best["config"])
        result.update(winner=system_of(folder), rounds=race["sizes"], jobs=sum(len(r["jobs"]) for r in race["rounds"]),
                      survivors=sorted(system_of(j["folder"]) for j in last["jobs"] if j["status"] == "ok"),
                      dropped_per_round=[sum(d["verdict"] == "dropped" for d in r["decisions"]) for r in race["rounds"]])
    else:
        jobs = folders(sweep_dir)
        (winner, best), (runner_up, second) = list(full_grid_leaderboard(jobs).items())[:2]  # labels: system.params.system=N
        result.update(jobs=len(jobs), winner=system_number(winner), winner_score=best["overall_score"],
                      winner_ci=best["ci"], runner_up=system_number(runner_up), runner_up_score=second["overall_score"],
                      runner_up_ci=second["ci"], runner_up_verdict=second["verdict"], separated=second["verdict"] == "worse")
    return result


def measure(work_dir: Path, args=None) -> dict:
    """The three sweeps on RAGEXP_BENCH_CASCADE_QUESTIONS questions (default 500, as the racing group)."""
    count = int(os.environ.get("RAGEXP_BENCH_CASCADE_QUESTIONS", 500))
    work_dir.mkdir(parents=True, exist_ok=True)
    data = write_data(work_dir, count)
    figures: dict = {"questions": count, "configurations": SYSTEMS, "planted_winner": WINNER,
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    figures["llm_full"] = sweep(work_dir, "llm-full", data, ["judge=llm", *LLM], racing=False)
    print(json.dumps({"llm_full": figures["llm_full"]}), flush=True)
    figures["cascade_full"] = sweep(work_dir, "cascade-full", data, CASCADE, racing=False)
    print(json.dumps({"cascade_full": figures["cascade_full"]}), flush=True)
    figures["cascade_racing"] = sweep(work_dir, "cascade-racing", data, CASCADE, racing=True)
    print(json.dumps({"cascade_racing": figures["cascade_racing"]}), flush=True)
    full = figures["llm_full"]["llm_requests"]
    figures["request_share"] = {side: round(figures[side]["llm_requests"] / full, 4) for side in ("cascade_full", "cascade_racing")}
    page(figures)
    return figures


def page(f: dict) -> None:
    """bench/results/cascade_sweep.md: the three sweeps side by side."""
    full = f["llm_full"]["llm_requests"]
    lines = ["# Cascade judging across a sweep: a planted winner, the full LLM grid, a cascade, a race of cascades", "",
             f"`python bench/run.py cascade_sweep` ({f['questions']} questions: RAGEXP_BENCH_CASCADE_QUESTIONS), "
             f"{f['date']}, {os.cpu_count()} cores. {f['configurations']} systems under test answer the first "
             f"{f['questions']} questions of HotpotQA dev500 (system=python, swept over system.params.system); "
             f"system {f['planted_winner']} answers 90% right, the others 45-72%. The expensive (and full-grid) judge: "
             "judge=llm against the local OpenAI-protocol test server at 200 ms, replies scripted from word overlaps; "
             "the cheap judge: the offline judge with the hash embedder; each sweep with its own fresh stage cache. "
             "Separated: the runner-up's Holm-corrected paired test says `worse` (95% bootstrap CIs, 2,000 resamples).",
             "", "| sweep | LLM requests | of the full grid's | wall, s (load at start) | winner | runner-up: verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for key, label in (("llm_full", "full grid, judge=llm"), ("cascade_full", "full grid, judge=cascade judge.sample=0.1"),
                       ("cascade_racing", "hydra/sweeper=racing, judge=cascade judge.sample=0.1")):
        side = f[key]
        runner = (f"{side['runner_up']}: {side['runner_up_verdict']}" if "runner_up" in side else
                  f"rounds of {', '.join(map(str, side['rounds']))} questions; dropped per round "
                  f"{', '.join(map(str, side['dropped_per_round']))}; survivors {side['survivors']}")
        lines.append(f"| {label} | {side['llm_requests']} | {side['llm_requests'] / full:.1%} | {side['wall_s']} "
                     f"({side['load_1min_before']}) | {side['winner']} | {runner} |")
    lines += ["", "A race of cascades starts where the sample draws hydra.sweeper.min_expensive=10 expensive judgements "
              "per configuration (100 questions at 10%) and tests none on fewer (docs/how-to/racing.md): it spends about "
              "240 before it can drop any of 24.", ""]
    (Path(__file__).parent / "results" / "cascade_sweep.md").write_text("\n".join(lines))


if __name__ == "__main__":
    import tempfile

    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-bench-cascade-sweep-"))), indent=2))
