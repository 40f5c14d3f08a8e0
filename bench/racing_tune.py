"""Tuning the racing sweeper's settings on grids that are NOT the bench's (bench/racing.py measures the
held-out HotpotQA grid with whatever this chose).

    PYTHONPATH=$PWD python bench/racing_tune.py full WORK     # the tuning grids' full grids, both judges
    PYTHONPATH=$PWD python bench/racing_tune.py replay WORK   # races replayed on them, per candidate setting
    PYTHONPATH=$PWD python bench/racing_tune.py race WORK GRID JUDGE [hydra.sweeper.x=y ...]  # one real race

The tuning grids (nothing in common with the bench grid's configurations; the first not even its dataset):
- `msmarco`: the first 500 questions of ../shared/data/autorag_msmarco, chunker=fixed,recursive,sentence x
  chunk_size=128,384 x top_k=2,4,6,8, BM25;
- `hotpot_other`: HotpotQA dev500 with chunk_size=128,1024 and top_k=2,4,8,16 (the bench grid has 256,512 and
  1,3,5,10), chunker=fixed,recursive,sentence, BM25.
Both judges as in the bench: the offline judge, and the scripted LLM judge (bench/racing.py) on the local
test server, here without latency (the scores do not depend on it; the request counts are the server's).

A replay runs the race's own decisions (ragexp.sweep.racing.decide on the rounds' nested samples, the samples
taken as question_sample takes them) on the full grid's per-question tables: a job on a sample scores
each question as the full run does (the corpus is never sampled), so the replay is the race, without
running it (`race` checks that on a real race). Its LLM requests are estimated as the distinct judgements
the race's cache would compute: (question, retrieved context, answer) triples among the questions each
configuration reached."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import racing as bench  # noqa: E402  (bench/racing.py)

DATA = (ROOT.parent / "shared" / "data").resolve()
COMMON = ["retriever=bm25", "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none"]
GRIDS = {
    "msmarco": (["chunker=fixed,recursive,sentence", "chunker.chunk_size=128,384", "retriever.top_k=2,4,6,8"],
                ["dataset=autorag_msmarco", f"dataset.path={DATA / 'autorag_msmarco'}", *COMMON], 500),
    "hotpot_other": (["chunker=fixed,recursive,sentence", "chunker.chunk_size=128,1024", "retriever.top_k=2,4,8,16"],
                     ["dataset=hotpotqa", f"dataset.path={DATA / 'hotpotqa_ircot_dev500'}", *COMMON], 500),
}
JUDGES = {"offline": [], "llm": ["judge=llm", "judge.endpoint.api_key_env=null", "judge.endpoint.max_concurrency=16"]}
LATENCY = float(os.environ.get("RAGEXP_TUNE_LATENCY", 0.0))


def full(work: Path) -> None:
    for grid, (values, base, n) in GRIDS.items():
        for judge, extra in JUDGES.items():
            if (work / f"{grid}-{judge}-full").exists():
                continue
            result = bench.side(work, f"{grid}-{judge}-full", extra, racing=False, questions=n, grid=values, base=base,
                                latency=LATENCY)
            result.pop("leaderboard")
            (work / f"{grid}-{judge}-full.done").write_text(json.dumps(result) + "\n")
            print(grid, judge, json.dumps(result), flush=True)


def race(work: Path, grid: str, judge: str, settings: list[str]) -> dict:
    values, base, n = GRIDS[grid]
    import hashlib

    name = f"{grid}-{judge}-race-{hashlib.sha256(repr(settings).encode()).hexdigest()[:8]}"
    result = bench.side(work, name, JUDGES[judge], racing=True, questions=n, grid=values, base=base, latency=LATENCY,
                        race_settings=settings)
    print(json.dumps(result), flush=True)
    return result


def grid_tables(sweep_dir: Path) -> tuple[dict[int, object], dict[int, str], dict[int, dict[str, str]], list[str]]:
    """The full grid's runs (configuration -> Run), names, each question's judgement key, the question ids."""
    from ragexp.sweep.racing.jobs import read_run

    runs, names, keys = {}, {}, {}
    for c, folder in enumerate(bench.folders(sweep_dir)):
        run = read_run(folder, folder.name)
        runs[c], names[c] = run, run.name
        keys[c] = {}
        for line in (folder / "questions.jsonl").read_text().splitlines():
            row = json.loads(line)
            keys[c][str(row["question_id"])] = json.dumps([row.get("context"), row.get("answer")], sort_keys=True)
    questions = [str(q) for q in runs[0].table["question_id"]]
    return runs, names, keys, questions


def subset(run, questions: set[str]):
    """The run as a job on these questions only would log it: its table's rows, its aggregates on them."""
    from ragexp.compare.metrics import FROM_TABLE, MetricSpec

    table = run.table[run.table["question_id"].astype(str).isin(questions)].reset_index(drop=True)
    metrics = dict(run.metrics)
    for spec in map(MetricSpec.from_json, run.aggregation or ()):
        if spec.kind in FROM_TABLE and spec.name in metrics:
            try:
                metrics[spec.name] = float(spec.value(table))
            except (KeyError, ValueError):
                pass
    return replace(run, table=table, metrics=metrics)


def replay(runs, names, keys, questions, rounds, min_questions=20, alpha=0.05, sample_seed=0, **options) -> dict:
    """One race on the full grid's tables: the race's decisions per round, its cost, its survivors."""
    from ragexp.datasets.subset import sample_order
    from ragexp.sweep.racing.decide import DROPPED, decide
    from ragexp.sweep.racing.plan import round_sizes

    order = [q.qid for q in sample_order([SimpleNamespace(qid=q) for q in questions], sample_seed)]
    sizes = round_sizes(tuple(rounds), min_questions, len(questions))
    survivors, reached, dropped = list(runs), {}, []
    for index, size in enumerate(sizes, start=1):
        chosen = set(order[:size])
        for c in survivors:
            reached[c] = size
        if index == len(sizes):
            break
        ran = {c: subset(runs[c], chosen) for c in survivors}
        decisions = decide(ran, {c: names[c] for c in ran}, "overall_score",
                           alpha=look_level(alpha, sizes, len(runs) - 1, options),
                           **race_options(options, index, sizes, len(ran)))
        dropped.append(sum(d.verdict == DROPPED for d in decisions))
        survivors = [d.config for d in decisions if d.verdict != DROPPED]
    judged = {(q, keys[c][q]) for c, n in reached.items() for q in order[:n]}
    return {"sizes": sizes, "dropped": dropped, "survivors": sorted(survivors),
            "evaluations": sum(reached.values()), "judgements": len(judged)}


def look_level(alpha: float, sizes: list[int], comparisons: int, options: dict) -> float:
    """`control`: "round" (each round at alpha) or "race" (every round at the level that keeps the
    whole race at alpha: ragexp.sweep.racing.plan.Plan.round_alpha)."""
    from ragexp.sweep.racing.sequential import round_level

    return round_level(tuple(sizes[:-1]), alpha, comparisons) if options.get("control") == "race" else alpha


def race_options(options: dict, index: int, sizes: list[int], configurations: int) -> dict:
    return {k: v for k, v in options.items() if k in ("keep_top", "resamples", "seed")}


def full_grid_best(runs, names) -> tuple[int, set[int]]:
    """The full grid's winner and the configurations its leaderboard does not find significantly worse."""
    from ragexp.compare import leaderboard
    from ragexp.store.reader import Selection

    board = leaderboard.build(Selection("", "full grid", list(runs.values())), "overall_score", resamples=2000)
    by_name = {run.name: c for c, run in runs.items()}
    winner = by_name[board.entries[0].label]
    ties = {by_name[e.label] for e in board.entries if "worse" not in str(e.verdict)}
    return winner, ties


SCHEDULES = {
    "10/25/50/100 (old default)": [0.1, 0.25, 0.5, 1.0],
    "5/10/20/40/100": [0.05, 0.1, 0.2, 0.4, 1.0],
    "5/10/20/30/50/100": [0.05, 0.1, 0.2, 0.3, 0.5, 1.0],
    "5/10/15/20/30/40/60/100": [0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 1.0],
    "x1.5 from 4%": [0.04, 0.06, 0.09, 0.135, 0.2, 0.3, 0.45, 0.675, 1.0],
    "10/20/30/40/50/75/100": [0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0],
    "x2 from 4%": [0.04, 0.08, 0.16, 0.32, 0.64, 1.0],
}
CANDIDATES = {f"{label} | {control}": dict(rounds=rounds, control=control)
              for label, rounds in SCHEDULES.items() for control in ("round", "race")}


def replay_all(work: Path, candidates: dict, seeds: range) -> list[dict]:
    rows = []
    grids = os.environ.get("RAGEXP_TUNE_GRIDS", ",".join(GRIDS)).split(",")
    for grid in grids:
        for judge in JUDGES:
            sweep = work / f"{grid}-{judge}-full"
            if len(bench.folders(sweep)) < 24 or (work / f"{grid}-{judge}-full.done").exists() is False:
                continue
            runs, names, keys, questions = grid_tables(sweep)
            full_judgements = len({(q, keys[c][q]) for c in runs for q in questions})
            winner, ties = full_grid_best(runs, names)
            for label, settings in candidates.items():
                for seed in seeds:
                    started = time.perf_counter()
                    r = replay(runs, names, keys, questions, sample_seed=seed, **settings)
                    rows.append({"grid": grid, "judge": judge, "candidate": label, "sample_seed": seed,
                                 "evaluation_share": round(r["evaluations"] / (len(runs) * len(questions)), 3),
                                 "judgement_share": round(r["judgements"] / full_judgements, 3),
                                 "winner_kept": winner in r["survivors"], "ties": len(ties),
                                 "ties_dropped": len(ties - set(r["survivors"])), "survivors": len(r["survivors"]),
                                 "dropped": r["dropped"], "sizes": r["sizes"],
                                 "seconds": round(time.perf_counter() - started, 1)})
                    print(json.dumps(rows[-1]), flush=True)
    return rows


if __name__ == "__main__":
    mode, work = sys.argv[1], Path(sys.argv[2])
    work.mkdir(parents=True, exist_ok=True)
    if mode == "full":
        full(work)
    elif mode == "race":
        race(work, sys.argv[3], sys.argv[4], sys.argv[5:])
    elif mode == "replay":
        seeds = range(int(os.environ.get("RAGEXP_TUNE_SEEDS", 5)))
        only = os.environ.get("RAGEXP_TUNE_CANDIDATES")
        chosen = {k: v for k, v in CANDIDATES.items() if not only or k in only.split(";")}
        out = work / "replay.jsonl"
        with out.open("a") as f:
            for row in replay_all(work, chosen, seeds):
                f.write(json.dumps(row) + "\n")
