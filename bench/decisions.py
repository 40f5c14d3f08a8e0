"""Figure group `decisions` (python bench/run.py decisions): the gate's regression check
(`gate.baseline=RUN`) on reruns of one configuration judged by the LLM judge against the
OpenAI-protocol test server (tests/openai_server.py), scripted with noise: each question has a
true faithfulness, and every judgement adds a normal error of NOISE_SD on the 1-10 scale
(rounded, clamped), drawn afresh on every run (no cache is shared between runs).

- false fails: RERUN_PAIRS pairs of runs of the same system (200 recorded answers), the second gated
  against the first (goal <= 5%);
- power: the same with a planted drop of 0.5 on faithfulness in the second run (goal >= 80%),
  beside what `python -m ragexp.plan` promises from the baseline run;
- the monitor's online A/B test on simulated streams (bench/ab_streams.py): A/A false decisions
  when the report is read every day, and the power its planner promises against what it delivers."""
from __future__ import annotations

import json
import os
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
QUESTIONS, NOISE_SD, DROP = 200, 1.0, 0.5
RERUN_PAIRS, DROP_PAIRS = 200, 50  # a 5% rate needs a few hundred pairs to be told from 10%
KEY = "RAGEXP_BENCH_LLM_KEY"


def rows() -> list[dict]:
    return [{"id": f"q{i}", "question": f"What does part {i} of the manual say?", "contexts": [f"Part {i} says {i}."],
             "answer": f"It says {i}."} for i in range(QUESTIONS)]


def truth(i: int) -> float:
    return 4.0 + (i * 37 % 50) / 10  # 4.0 .. 8.9, fixed per question


def scripted(rng: random.Random, drop: float):
    from openai_server import judge_json, user_text

    def chat(body):
        i = int(re.search(r"part (\d+)", user_text(body)).group(1))
        faithfulness = min(10, max(1, round(truth(i) - drop + rng.gauss(0, NOISE_SD))))
        return judge_json(8, 7, faithfulness, False)
    return chat


def evaluate(server, folder: Path, baseline: Path | None = None):
    import ragexp

    overrides = ["judge=llm", f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={KEY}",
                 "judge.endpoint.max_concurrency=32", f"cache.dir={folder}-cache", f"llm.cache_dir={folder}-cache/llm",
                 "gate.regression=[faithfulness]", *([f"gate.baseline={baseline}"] if baseline else [])]
    return ragexp.evaluate(rows(), overrides=overrides, output_dir=folder)


def pairs(server, work_dir: Path, drop: float, seed: int, count: int) -> dict:
    failed, started = 0, time.perf_counter()
    for n in range(count):
        rng = random.Random(seed * 1000 + n)
        server.chat = scripted(rng, 0.0)
        base = evaluate(server, work_dir / f"{seed}-{n}-base")
        server.chat = scripted(rng, drop)
        new = evaluate(server, work_dir / f"{seed}-{n}-new", base.folder)
        failed += not new.passed
    return {"pairs": count, "gate_failed": failed, "share": round(failed / count, 3),
            "seconds": round(time.perf_counter() - started, 1)}


def promised(folder: Path) -> str:
    from argparse import Namespace

    from ragexp.plan import plan

    [line] = plan(Namespace(run=str(folder), metric=["faithfulness"], drop=None, questions=QUESTIONS, alpha=0.05,
                            power=0.8, correlation=0.0, tracking_uri=None))
    return line


def measure(work_dir: Path, args=None) -> dict:
    from openai_server import OpenAIServer

    os.environ[KEY] = "bench"
    work_dir.mkdir(parents=True, exist_ok=True)
    figures: dict = {"load_1min": round(os.getloadavg()[0], 1), "questions": QUESTIONS, "noise_sd": NOISE_SD,
                     "drop": DROP}
    with OpenAIServer() as server:
        figures["reruns"] = pairs(server, work_dir / "reruns", 0.0, 1, RERUN_PAIRS)
        figures["planted_drop"] = pairs(server, work_dir / "drop", DROP, 2, DROP_PAIRS)
        server.chat = scripted(random.Random(7), 0.0)
        figures["planner"] = promised(evaluate(server, work_dir / "planner").folder)
    from ab_streams import measure as ab_measure

    figures["ab"] = ab_measure()
    page(figures)
    return figures


def page(f: dict) -> None:
    r, d = f["reruns"], f["planted_drop"]
    lines = ["# Decisions: the gate's regression check on noisy reruns", "",
             f"`python bench/run.py decisions`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, 1-minute load "
             f"{f['load_1min']} at the start (bench/decisions.py): {f['questions']} recorded answers judged by judge=llm "
             f"against tests/openai_server.py, each judgement's faithfulness the question's own plus a normal error of sd "
             f"{f['noise_sd']} on 1-10 (rounded, clamped), drawn afresh each run; gate.regression=[faithfulness], alpha 0.05.", "",
             "| figure | value | goal |", "| --- | --- | --- |",
             f"| reruns of the same system that fail the gate | {r['gate_failed']} of {r['pairs']} ({r['share']:.1%}) | <= 5% |",
             f"| a planted drop of {f['drop']} on faithfulness, detected | {d['gate_failed']} of {d['pairs']} ({d['share']:.1%}) | >= 80% |",
             f"| what python -m ragexp.plan promises from one such run | {f['planner']} | |", ""]
    if "ab" in f:
        from ab_streams import page_lines

        lines += page_lines(f["ab"])
    (Path(__file__).parent / "results" / "decisions.md").write_text("\n".join(lines))


if __name__ == "__main__":
    print(json.dumps(measure(Path("/tmp/bench-decisions")), indent=2))
