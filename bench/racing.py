"""Bench group `racing` (`python bench/run.py racing`): a grid of 24 configurations on HotpotQA dev500,
run as a full grid and as a racing sweep (hydra/sweeper=racing, default settings) side by side, each
with its own fresh stage cache, with the offline judge and with an LLM judge against the local
OpenAI-protocol test server (tests/openai_server.py) at 200 ms per request.

Per judge: question evaluations (a configuration judging a question), judgements computed, LLM
requests the server received, wall time; the full grid's winner (its leaderboard: ragexp.compare,
95% bootstrap CIs) and whether racing's winner is it or lies within its CI, and whether the full
grid's winner survived the race. Goal: racing at most 35% of the full grid's question evaluations
and requests, the full grid's winner never dropped.

The grid is cheap on purpose (the machine is shared): BM25 retrieval, the hash embedder for the
offline generator's and judge's scoring, 3 chunkers x 2 chunk sizes x 4 top_k, tracker=none. The
LLM judge's replies come from `scripted_judge`: scores computed from the prompt's own tags (token
overlap of answer, expected answer and context), so that configurations differ as they would with
a real judge, at a real judge's request count and latency.

The race's default rounds were chosen on other grids (bench/racing_tune.py), not on this one."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()
GRID = ["chunker=fixed,recursive,sentence", "chunker.chunk_size=256,512", "retriever.top_k=1,3,5,10"]
BASE = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", "retriever=bm25", "embedder=hash",
        "embedder@scoring_embedder=hash", "tracker=none"]
LATENCY = 0.2
WORDS = re.compile(r"\w+")


def tagged(text: str, tag: str) -> str:
    found = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.DOTALL)
    return found.group(1) if found else ""


def overlap(part: str, whole: str) -> float:
    """The share of `part`'s distinct words that are in `whole`."""
    words = set(WORDS.findall(part.lower()))
    return len(words & set(WORDS.findall(whole.lower()))) / len(words) if words else 0.0


def scripted_judge(body: dict) -> str:
    """A deterministic stand-in for an LLM judge, scoring from the prompt: context relevance = how
    much of the expected answer the context holds, answer similarity = how much of the expected
    answer the generated one holds, faithfulness = how much of the generated answer the context holds."""
    messages = body.get("messages", [])
    if '"answer_similarity"' not in "\n".join(str(m.get("content", "")) for m in messages):
        return "The documents say so [Doc 1]."
    # the data are in the user message (the system prompt names the tags too)
    text = "\n".join(str(m.get("content", "")) for m in messages if m.get("role") == "user")
    context, expected = tagged(text, "context"), tagged(text, "expected_answer")
    generated = tagged(text, "generated_answer")
    scale = lambda share: max(1, min(10, round(1 + 9 * share)))  # noqa: E731
    faithful = overlap(generated, context)
    return json.dumps({"context_relevance": scale(overlap(expected, context)),
                       "answer_similarity": scale(overlap(expected, generated)), "faithfulness": scale(faithful),
                       "hallucination": faithful < 0.5, "reasoning": "scripted: word overlap"})


def ragexp(args: list[str], cwd: Path, path: tuple[Path, ...] = ()) -> tuple[float, str]:
    """`python -m ragexp ARGS` with this checkout's ragexp (and `path`, e.g. a module a system=python run
    imports) first on the path: its wall time and output."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))})
    if proc.returncode != 0:
        raise SystemExit(f"bench: ragexp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started, proc.stdout


def folders(sweep_dir: Path) -> list[Path]:
    return sorted((p.parent for p in sweep_dir.glob("*/results.json")), key=lambda p: int(p.name))


def work(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())["work"]


def side(work_dir: Path, name: str, extra: list[str], racing: bool, questions: int, grid: list[str] = GRID,
         base: list[str] = BASE, latency: float = LATENCY, race_settings: list[str] | None = None) -> dict:
    """One side (full grid or race) of one judge: its own sweep folder, cache and test server
    (`grid`, `base`, `latency`: the tuning grid's, bench/racing_tune.py; `race_settings`: hydra.sweeper.* overrides)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    sweep_dir = work_dir / name
    args = ["-m", *(["hydra/sweeper=racing", *(race_settings or [])] if racing else []), *grid, *base,
            f"dataset.limit={questions}",
            f"cache.dir={work_dir / (name + '-cache')}", f"hydra.sweep.dir={sweep_dir}", *extra]
    load = os.getloadavg()[0]
    with OpenAIServer(latency=latency, chat=scripted_judge) as server:
        if any(a.startswith("judge=llm") for a in extra):
            args += [f"judge.endpoint.base_url={server.base_url}"]
        seconds, _ = ragexp(args, work_dir)
        requests = len(server.chat_requests())
    jobs = folders(sweep_dir)
    result = {"wall_s": round(seconds, 1), "load_1min_before": round(load, 1), "jobs": len(jobs),
              "judgements_computed": sum(work(f).get("judgements_computed", 0) for f in jobs),
              "answers_computed": sum(work(f).get("answers_computed", 0) for f in jobs), "llm_requests": requests}
    if racing:
        race = json.loads((sweep_dir / "report" / "race.json").read_text())
        result.update(question_evaluations=race["counts"]["racing_question_evaluations"],
                      rounds=race["sizes"], dropped_per_round=[sum(d["verdict"] == "dropped" for d in r["decisions"]) for r in race["rounds"]])
        best = next(d for d in race["rounds"][-1]["decisions"] if d["rank"] == 1)
        folder = next(Path(j["folder"]) for j in race["rounds"][-1]["jobs"] if j["config"] == best["config"])
        result["winner"] = next(iter(json.loads((folder / "results.json").read_text())))
        result["survivor_names"] = [next(iter(json.loads((Path(j["folder"]) / "results.json").read_text())))
                                    for j in race["rounds"][-1]["jobs"] if j["status"] == "ok"]
    else:
        result["question_evaluations"] = sum(
            next(iter(json.loads((f / "results.json").read_text()).values()))["total_questions"] for f in jobs)
        result["leaderboard"] = full_grid_leaderboard(jobs)
    return result


def full_grid_leaderboard(jobs: list[Path]) -> dict:
    """The full grid's winner and every configuration's overall_score with its 95% CI (ragexp.compare)."""
    sys.path.insert(0, str(ROOT))
    from ragexp.compare import leaderboard
    from ragexp.store.reader import Selection
    from ragexp.sweep.racing.jobs import read_run

    runs = [read_run(f, f.name) for f in jobs]
    board = leaderboard.build(Selection("", "full grid", runs), "overall_score", resamples=2000)
    return {e.label: {"overall_score": round(e.value("overall_score"), 4),
                      "ci": [round(e.values["overall_score"].low, 4), round(e.values["overall_score"].high, 4)],
                      "verdict": e.verdict} for e in board.entries}


def compare_sides(full: dict, race: dict) -> dict:
    board = full["leaderboard"]
    winner = next(iter(board))
    low, high = board[winner]["ci"]
    raced = board.get(race["winner"], {}).get("overall_score")
    return {"full_grid_winner": winner, "racing_winner": race["winner"], "same_winner": winner == race["winner"],
            "racing_winner_full_score": raced, "full_winner_ci": [low, high],
            "racing_winner_within_ci": raced is not None and low <= raced <= high,
            "full_winner_survived": winner in race["survivor_names"],
            "question_share": round(race["question_evaluations"] / full["question_evaluations"], 3),
            "judgement_share": round(race["judgements_computed"] / max(1, full["judgements_computed"]), 3),
            "request_share": round(race["llm_requests"] / full["llm_requests"], 3) if full["llm_requests"] else None,
            "wall_share": round(race["wall_s"] / full["wall_s"], 3)}


def measure(work_dir: Path, args=None) -> dict:
    """Both judges, full grid then race, on `questions` questions (RAGEXP_BENCH_RACING_QUESTIONS, default
    all 500; the LLM side on RAGEXP_BENCH_RACING_LLM_QUESTIONS, default the same)."""
    questions = int(os.environ.get("RAGEXP_BENCH_RACING_QUESTIONS", 500))
    llm_questions = int(os.environ.get("RAGEXP_BENCH_RACING_LLM_QUESTIONS", questions))
    judges = {"offline": ([], questions),
              "llm": (["judge=llm", "judge.endpoint.api_key_env=null", "judge.endpoint.max_concurrency=16"],
                      llm_questions)}
    only = os.environ.get("RAGEXP_BENCH_RACING_JUDGES", "offline,llm").split(",")
    results = {}
    for judge, (extra, n) in judges.items():
        if judge not in only:
            continue
        full = side(work_dir, f"{judge}-full", extra, racing=False, questions=n)
        race = side(work_dir, f"{judge}-race", extra, racing=True, questions=n)
        results[judge] = {"questions": n, "configurations": 24, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "full_grid": full, "racing": race,
                          "comparison": compare_sides(full, race)}
        print(json.dumps({judge: results[judge]["comparison"]}, indent=2), flush=True)
    return results


def markdown(figures: dict) -> str:
    """The figures as bench/results/racing.md's tables, one per judge."""
    lines = []
    for judge, f in figures.items():
        full, race, c = f["full_grid"], f["racing"], f["comparison"]
        share = lambda a, b: f"{a / b:.1%}" if b else "—"  # noqa: E731
        lines += [f"### {judge} judge: {f['configurations']} configurations x {f['questions']} questions", "",
                  "| | full grid | racing | racing / full |", "| --- | --- | --- | --- |",
                  f"| question evaluations | {full['question_evaluations']} | {race['question_evaluations']} | "
                  f"{share(race['question_evaluations'], full['question_evaluations'])} |",
                  f"| judgements computed | {full['judgements_computed']} | {race['judgements_computed']} | "
                  f"{share(race['judgements_computed'], full['judgements_computed'])} |",
                  f"| LLM requests (server count) | {full['llm_requests']} | {race['llm_requests']} | "
                  f"{share(race['llm_requests'], full['llm_requests'])} |",
                  f"| jobs | {full['jobs']} | {race['jobs']} | |",
                  f"| wall time, s | {full['wall_s']} | {race['wall_s']} | {share(race['wall_s'], full['wall_s'])} |",
                  f"| 1-min load at its start | {full['load_1min_before']} | {race['load_1min_before']} | |", "",
                  f"Rounds of {', '.join(map(str, race['rounds']))} questions; dropped per round: "
                  f"{', '.join(map(str, race['dropped_per_round']))}; {len(race['survivor_names'])} survivors.",
                  f"Full grid's winner: `{c['full_grid_winner']}` (overall_score 95% CI {c['full_winner_ci']}); "
                  f"racing's winner: `{c['racing_winner']}` (full-grid score {c['racing_winner_full_score']}): "
                  f"same winner: {'yes' if c['same_winner'] else 'no'}, within the CI: "
                  f"{'yes' if c['racing_winner_within_ci'] else 'no'}; full grid's winner survived the race: "
                  f"{'yes' if c['full_winner_survived'] else 'NO'}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    figures = measure(Path(tempfile.mkdtemp(prefix="ragexp-bench-racing-")))
    text = json.dumps(figures, indent=2)
    if out:
        out.write_text(text + "\n")
    print(text)
