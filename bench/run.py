"""`make bench`: ragexp's speed and memory figures on ../shared/data/hotpotqa_ircot_dev500.

Writes bench/results.json and bench/results.md (beside main's figures of 2026-11-30, kept in
bench/before.json) and prints the table. Each figure is measured once, in one run on this machine,
in groups that also run alone (`python bench/run.py GROUP [GROUP ...]`):
- sweep: cold vs warm time of a 6-job sweep (3 chunkers x 2 retrievers, dataset.limit=200), the
  embedding calls of the warm one (goal: warm >= 20x faster, 0 embeddings, 0 LLM requests), how
  many times chunking and corpus embedding ran in the cold one (goal: 3 each, not 6), and the cold
  sweep's wall time as a multiple of embedding its distinct texts once with the same model;
- full_run: the default pipeline on all 500 questions divided by embedding the same texts alone
  with the same model (goal: <= 1.5), and that run's peak memory (RSS);
- help: wall time of `python -m ragexp --help` (goal: <= 0.15 s, the median of 5);
- embedding_map: what embedding_map.png adds to a default run on the sample (goal: <= 2 s);
- logging: what logging to MLflow adds to a default run on the sample, cached stages and an existing
  SQLite store, the medians of 5 runs each way (goal: <= 1 s);
- judges: judge=llm and judge=triad against a local OpenAI-protocol server with 200 ms latency at
  concurrency 1, 8, 16, 32: judged questions/s (goal for llm: >= 80% of concurrency / latency),
  mean requests in flight, CPU ms per judged question, the first request's delay
  (`--code DIR`: another checkout's code; `python bench/run.py triad`: the triad at 16 alone);
- monitor: `python -m ragexp.monitor` on a generated 1,000,000-record log, without judging: records
  per second and peak RSS (goal: >= 100,000 records/s, < 500 MB);
- embedding (bench/embedding_backends.py): texts/s on the HotpotQA paragraphs, ndcg@10 and mrr of
  retriever=dense, per MiniLM backend and embedder=static;
- judge_agreement (bench/judge_agreement.py): the judges against people's faithfulness labels, per set, held out;
- rerankers (bench/rerankers.py): the rerank stage's time per question on the sample (mmr, two
  cross-encoders) and the LLM reranker's requests, tokens and cost per question (test server);
- tracing: wall time of a 200-question run (BM25, the offline judge, stage cache off, logged to a
  SQLite store) without and with tracing=on (goal: at most 10% slower);
- own_system (bench/own_system.py): recorded outputs judged offline, rows/s; system=http against a
  0 ms local service and system=python, ms per question of the answering stage;
- short_answers (bench/short_answers.py): the offline judges on labelled short answers ("Port 7070."),
  held out: false alarms on supported ones (goal <= 0.05), recall of unsupported ones (goal >= 0.90);
- cheap_judge (bench/cheap_judge.py): the default offline judge on 100 recorded HotpotQA rows with
  paraphrased answers, cold caches: rows/s of its judging stage (goal: >= 10), also at a load of 2x the cores;
- cascade_sweep (bench/cascade_sweep.py): 24 systems with a planted winner, judged by the LLM judge (test
  server) on the full grid, by judge=cascade at 10%, and by a racing sweep of cascades: LLM requests, the
  winner and whether it is separated (goal: the same winner; with racing, <= 5% of the full grid's requests);
- ppi (bench/ppi_coverage.py): coverage of the human-corrected (PPI) 95% CI vs the judge-only CI.
- racing (bench/racing.py): 24 configurations, full grid vs hydra/sweeper=racing, offline and LLM
  judge (200 ms): question evaluations, LLM requests, wall time, the winners (goal: <= 35%, winner kept).
- bm25s (bench/bm25_compare.py): retriever.impl=bm25s vs rank_bm25, ndcg@10 on HotpotQA and speed at 10^5 chunks;
- deadlines (bench/deadlines.py): the triad's judging stage vs two round trips, in process and in the
  command (`triad_cli_judging_s`, median of 5; goal: <= 1.15x), a
  reply sent a byte a second per door (goal: fails in < 3 s), a 50 MB reply's peak memory;
- chaos (bench/chaos.py): 8 runs and 2 sweeps started together on one new store, 20 times (goal: 20 of
  20 keep to their own folders, params and scores);
- grids (bench/grids.py): a 48-point sweep of cheap configurations: wall over its jobs' own time
  (goal: <= 3), the time before the first job, peak RSS;
- hooks (bench/hooks.py): what each private hook of a dependency kept for speed gains, measured with it
  switched off (docs/contributing/private-hooks.md);
- mlflow_genai (bench/mlflow_genai.py): what a light MLflow trace per question adds to logging a
  500-question run, SQLite store and `mlflow server` (goal: <= 5 ms per question on SQLite);
- local_model (bench/local_model.py): the test model served by ragexp on one thread: start to first token,
  judgements/s with 1 and 2 parallel slots, tokens/s, the server's peak RSS;
- million (bench/million.py): BM25 (both impls), embedder=static (Qdrant local mode and dense_exact) and MiniLM on 10^6 chunks, time and peak RSS.
- input_caps (bench/input_caps.py): recorded outputs with a 50 MB answer or context, refused and skipped, and a
  10,000-point grid refused, through the whole command: wall and peak RSS (goals: < 10 s and < 300 MB; < 5 s);
  a 1,000-point grid's size and first progress lines (goal: < 5 s); medians of 3, the load at start and end.
"""
from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's ragexp, in this process and (PYTHONPATH) in the runs it starts
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()
SWEEP = ["chunker=fixed,recursive,sentence", "retriever=dense,bm25"]


def ragexp(*args: str, cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"bench: ragexp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started, proc.stdout + proc.stderr


def work_lines(stdout: str) -> list[dict[str, int]]:
    """The `work:` line each job prints: what it computed or took from the cache."""
    return [{k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)} for line in re.findall(r"work: (.*)", stdout)]


def sweep(work_dir: Path, limit: int = 200) -> dict:
    args = ["-m", *SWEEP, "dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={limit}", "tracker=none"]
    cold_s, cold_out = ragexp(*args, cwd=work_dir)
    warm_s, warm_out = ragexp(*args, cwd=work_dir)
    cold, warm = work_lines(cold_out), work_lines(warm_out)
    return {
        "jobs": len(cold),
        "cold_s": round(cold_s, 1),
        "warm_s": round(warm_s, 1),
        "speedup": round(cold_s / warm_s, 1),
        "chunking_runs": sum(w.get("chunks_computed", 0) for w in cold),
        "corpus_embedding_runs": sum(1 for w in cold if w.get("index_embedded_texts", 0) > 0),
        "warm_embedded_texts": sum(w.get("embedded_texts", 0) for w in warm),
        "warm_stage_computations": sum(v for w in warm for k, v in w.items() if k.endswith("_computed")),
        "distinct": distinct_embedding(work_dir, cold_s, limit, sum(w.get("embedded_texts", 0) for w in cold)),
    }


def compose_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


@contextmanager
def embedding_caches() -> Iterator[list]:
    """Every run-wide EmbeddingCache made in the block (instrumentation of this process only)."""
    from ragexp.components.embedders import EmbeddingCache

    made: list = []
    original = EmbeddingCache.__dict__["beside"]

    def beside(stage_cache):
        made.append(original.__func__(EmbeddingCache, stage_cache))
        return made[-1]

    EmbeddingCache.beside = beside  # type: ignore[method-assign,assignment]
    try:
        yield made
    finally:
        EmbeddingCache.beside = original  # type: ignore[method-assign]


def embedding_alone(cfg, caches: list) -> tuple[int, float]:
    """The distinct texts the runs' embedding caches hold for the config's embedder (`cfg.embedder`,
    the same model), embedded again once, longest first in its batches, without any cache: their
    number and the seconds it took."""
    from hydra.utils import instantiate

    embedder = instantiate(cfg.embedder)
    texts = sorted({t for cache in caches for t in cache.memo.get(embedder.key(), {})}, key=len, reverse=True)
    embedder.embed_batch(texts[:1])  # the model loaded before the clock starts, as a run's first batch does
    started = time.perf_counter()
    for start in range(0, len(texts), embedder.batch_size):
        embedder.embed_batch(texts[start : start + embedder.batch_size])
    return len(texts), time.perf_counter() - started


def distinct_embedding(work_dir: Path, cold_s: float, limit: int, embedded: int) -> dict:
    """The cold sweep's wall time as a multiple of its distinct embedding work: the sweep's jobs are
    run again in this process against a copy of the cold sweep's vectors only (every stage computed,
    no text embedded), which shows every text the sweep embedded; those are then embedded once."""
    replay = work_dir / "replay-cache"
    replay.mkdir()
    shutil.copy(work_dir / ".ragexp-cache" / "embeddings.sqlite", replay / "embeddings.sqlite")
    from ragexp.run.pipeline import run

    base = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={limit}", "tracker=none", f"cache.dir={replay}"]
    with embedding_caches() as caches:
        for chunker in SWEEP[0].split("=")[1].split(","):
            for retriever in SWEEP[1].split("=")[1].split(","):
                run(compose_config([*base, f"chunker={chunker}", f"retriever={retriever}"]))
    recomputed = sum(c.stats["embedded_texts"] for c in caches)
    texts, seconds = embedding_alone(compose_config(base), caches)
    return {"texts": texts, "cold_embedded_texts": embedded, "replay_embedded_texts": recomputed,
            "embedding_s": round(seconds, 1), "multiple": round(cold_s / seconds, 2)}


def full_run_vs_embedding() -> dict:
    """The default pipeline on all 500 questions, in this process (cache off), then the texts it
    embedded, embedded again alone with the same model."""
    from ragexp.run.pipeline import run

    cfg = compose_config(["dataset=hotpotqa", f"dataset.path={HOTPOT}", "tracker=none", "cache.enabled=false"])
    with embedding_caches() as caches:
        started = time.perf_counter()
        result = run(cfg)
        run_s = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    texts, embed_s = embedding_alone(cfg, caches)
    return {"questions": result.aggregates["total_questions"], "overall_score": result.aggregates.get("overall_score"),
            "run_s": round(run_s, 1), "embedded_texts": texts, "embedding_alone_s": round(embed_s, 1),
            "ratio": round(run_s / embed_s, 2), "peak_rss_mb": round(peak_mb), "stage_s": result.timings}


def help_time(work_dir: Path) -> dict:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ragexp", "--help"], cwd=work_dir, capture_output=True, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
        times.append(time.perf_counter() - started)
    return {"best_s": round(min(times), 3), "median_s": round(sorted(times)[2], 3)}


def logging_cost(work_dir: Path, repeats: int = 5) -> dict:
    """What logging to MLflow adds to a single default run on the bundled sample: its stages cached
    and its SQLite store made by a first run, then `repeats` runs logged to MLflow and as many with
    tracker=none, alternating; the medians and their difference (goal: <= 1 s)."""
    folder = work_dir / "logging"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    subprocess.run([sys.executable, "-m", "ragexp"], cwd=folder, capture_output=True, check=True, env=env)
    times: dict[str, list[float]] = {"mlflow": [], "none": []}
    for _ in range(repeats):
        for tracker in times:
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ragexp", f"tracker={tracker}"], cwd=folder, capture_output=True,
                           check=True, env=env)
            times[tracker].append(round(time.perf_counter() - started, 2))
    median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"mlflow_s": times["mlflow"], "none_s": times["none"], "median_mlflow_s": median["mlflow"],
            "median_none_s": median["none"], "added_s": round(median["mlflow"] - median["none"], 2)}


def embedding_map_cost(work_dir: Path) -> dict:
    """What the embedding map adds to a default run on the bundled sample: the same run (its stages
    cached by a first run, tracker=none) with embedding_map=false and =auto, 3 times each, alternating."""
    folder = work_dir / "embedding_map"
    args = [sys.executable, "-m", "ragexp", "tracker=none", f"cache.dir={folder / 'cache'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*args, f"hydra.run.dir={folder / 'warm'}"], cwd=work_dir, capture_output=True, check=True, env=env)
    times: dict[str, list[float]] = {"false": [], "auto": []}
    for i in range(3):
        for value in times:
            started = time.perf_counter()
            subprocess.run([*args, f"embedding_map={value}", f"hydra.run.dir={folder / f'{value}-{i}'}"], cwd=work_dir,
                           capture_output=True, check=True, env=env)
            times[value].append(time.perf_counter() - started)
    off, on = sorted(times["false"])[1], sorted(times["auto"])[1]
    return {"off_s": round(off, 2), "on_s": round(on, 2), "added_s": round(on - off, 2)}


LATENCY = 0.2  # seconds the test server waits before each reply
# questions per run, by judge and concurrency: enough for several rounds of requests, few at concurrency 1
QUESTIONS = {"llm": {1: 25, 8: 100, 16: 200, 32: 200}, "triad": {1: 10, 8: 50, 16: 50, 32: 100}}


def judge_run(work_dir: Path, judge: str, concurrency: int, questions: int, code: Path = ROOT) -> dict:
    """One run of `judge` (llm or triad) on `questions` HotpotQA questions against a fresh test
    server with 200 ms latency: judged questions/s by the judging stage's clock, the mean
    requests in flight as the server saw them (first arrival to last reply), the judging stage's
    CPU time (all threads) per judged question, and how long after the stage started the first
    request arrived. The code measured is `code`'s (PYTHONPATH); hash embedders and bm25, so
    that only the judging counts; the stage cache (shared by the runs of a work folder) is on, as
    by default: a fresh server has a new address, so no judgement or reply is in it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    out = work_dir / f"{judge}-{concurrency}-{questions}"
    args = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={questions}", "retriever=bm25",
            "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none", f"cache.dir={work_dir / 'cache'}",
            f"judge={judge}", "judge.endpoint.api_key_env=null", f"judge.endpoint.max_concurrency={concurrency}",
            f"hydra.run.dir={out}", *(["weights=triad"] if judge == "triad" else [])]
    env = {**os.environ, "PYTHONPATH": str(code)}
    with OpenAIServer(latency=LATENCY) as server:
        proc = subprocess.run([sys.executable, "-m", "ragexp", *args, f"judge.endpoint.base_url={server.base_url}"],
                              cwd=work_dir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench: the {judge} run at concurrency {concurrency} failed:\n{proc.stderr[-3000:]}")
        requests = server.chat_requests()
        mean_in_flight, max_in_flight = server.mean_in_flight(), server.max_in_flight
    aggregates = next(iter(json.loads((out / "results.json").read_text()).values()))
    judged = int(aggregates["total_questions"] - aggregates["failed_questions"])
    timings = json.loads((out / "run.json").read_text())["timings_s"]
    seconds, cpu = timings["judging"], timings.get("judging_cpu")  # main before this figure had no CPU clock
    ceiling = concurrency / LATENCY / (len(requests) / questions)  # every slot busy all the time
    return {"questions": questions, "judged": judged, "requests": len(requests), "judging_s": round(seconds, 2),
            "per_second": round(judged / seconds, 1), "ceiling": round(ceiling, 1),
            "share_of_ceiling": round(judged / seconds / ceiling, 3), "mean_in_flight": round(mean_in_flight, 1),
            "max_in_flight": max_in_flight, "cpu_ms_per_question": round(1000 * cpu / judged, 2) if cpu else None,
            "first_request_ms": first_request_ms(out / "ragexp.log", requests), "load_1min": round(os.getloadavg()[0], 1)}


def first_request_ms(log: Path, requests: list[dict]) -> int | None:
    """Milliseconds from the judging stage's start (the log line that ends generation, stamped to
    the millisecond) to the first request's arrival at the server."""
    found = re.search(r"^\[(\S+ \S+)\]\[ragexp\.pipeline\]\[INFO\] - generation:", log.read_text(), re.MULTILINE)
    if not found or not requests:
        return None
    started = time.mktime(time.strptime(found.group(1)[:19], "%Y-%m-%d %H:%M:%S")) + int(found.group(1)[20:]) / 1000
    return round(1000 * (min(r["wall"] for r in requests) - started))


def judges(work_dir: Path, code: Path = ROOT) -> dict:
    """Figure 5: `judge=llm` and `judge=triad` at concurrency 1, 8, 16 and 32 (see judge_run)."""
    return {judge: {str(c): judge_run(work_dir, judge, c, n, code) for c, n in counts.items()}
            for judge, counts in QUESTIONS.items()}


def triad_throughput(work_dir: Path, questions: int = 50, concurrency: int = 16) -> dict:
    """`python bench/run.py triad`: the triad alone at concurrency 16 on 50 questions."""
    return judge_run(work_dir, "triad", concurrency, questions)


def monitor_throughput(work_dir: Path, records: int = 1_000_000) -> dict:
    """The monitor on a generated log (ragexp.monitor.synthetic), no judging, tracker=none: its own
    read-and-summarise time and the whole command's wall time and peak RSS (os.wait4 of that child)."""
    from ragexp.monitor.synthetic import generate

    log = generate(work_dir / "traffic.jsonl", records, span="30d", degrade_from="0.9", slower=2, errors=0.05)
    out = work_dir / "monitor-out"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ragexp.monitor", f"monitor.input={log}", "monitor.window=1d",
                             "monitor.judge_sample=0", "tracker=none", f"hydra.run.dir={out}"], cwd=work_dir,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):  # 3: an alert fired, which is fine here
        raise SystemExit(f"bench: ragexp.monitor failed ({code}):\n{proc.stderr.read().decode()[-3000:]}")
    summary = json.loads((out / "windows.json").read_text())
    return {"records": summary["records"], "file_mb": round(log.stat().st_size / 1e6), "read_s": summary["read_s"],
            "records_per_s": round(summary["records"] / summary["read_s"]), "read_cpu_s": summary["read_cpu_s"],
            "records_per_cpu_s": round(summary["records"] / summary["read_cpu_s"]), "wall_s": round(wall_s, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_1min": round(os.getloadavg()[0], 1)}


def tracing_cost(work_dir: Path, questions: int = 200) -> dict:
    """Wall time of `python -m ragexp` on `questions` HotpotQA questions (BM25, the offline judge,
    stage cache off, logged to a SQLite store) without and with tracing=on, in the order off, on,
    on, off (the machine's drift cancels out), and the mean of each; with the time the traced runs
    spent writing their traces to the store (their log's `traces logged ... in Xs`)."""
    args = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={questions}", "retriever=bm25",
            "cache.enabled=false", f"tracker.tracking_uri=sqlite:///{work_dir / 'tracing.db'}"]
    times: dict[str, list[float]] = {"off": [], "on": []}
    written = []
    for mode in ("off", "on", "on", "off"):
        folder = work_dir / f"tracing-{mode}-{len(times[mode])}"
        seconds, output = ragexp(*args, f"tracing={mode}", f"hydra.run.dir={folder}", cwd=work_dir)
        times[mode].append(round(seconds, 1))
        written += [float(s) for s in re.findall(r"traces logged to run \w+ in ([\d.]+)s", output)]
    off, on = (sum(times[m]) / len(times[m]) for m in ("off", "on"))
    return {"questions": questions, "off_s": times["off"], "on_s": times["on"], "overhead": round(on / off - 1, 3),
            "traces_written_s": written, "load_1min": round(os.getloadavg()[0], 1)}


GROUPS = {  # figure group -> how it is measured (each runs alone: `python bench/run.py GROUP ...`)
    "help": lambda work_dir, args: help_time(work_dir),
    "embedding_map": lambda work_dir, args: embedding_map_cost(work_dir),
    "logging": lambda work_dir, args: logging_cost(work_dir),
    "sweep": lambda work_dir, args: sweep(work_dir, args.limit),
    "judges": lambda work_dir, args: judges(work_dir, args.code),
    "full_run": lambda work_dir, args: full_run_vs_embedding(),
    "monitor": lambda work_dir, args: monitor_throughput(work_dir),
    "embedding": lambda work_dir, args: embedding_figures(),
    "tracing": lambda work_dir, args: tracing_cost(work_dir),
    "judge_agreement": lambda work_dir, args: __import__("judge_agreement").measure(work_dir, args),
    "rerankers": lambda work_dir, args: __import__("rerankers").measure(work_dir, args),
    "own_system": lambda work_dir, args: __import__("own_system").measure(work_dir, args),
    "ppi": lambda work_dir, args: __import__("ppi_coverage").measure(work_dir, args),
    "racing": lambda work_dir, args: racing_figures(work_dir, args),
    "deadlines": lambda work_dir, args: __import__("deadlines").measure(work_dir, args),
    "rubric": lambda work_dir, args: __import__("rubric").measure(work_dir, args),
    "cascade": lambda work_dir, args: __import__("cascade").measure(work_dir, args),
    "short_answers": lambda work_dir, args: __import__("short_answers").measure(work_dir, args),
    "cheap_judge": lambda work_dir, args: __import__("cheap_judge").measure(work_dir, args),
    "cascade_sweep": lambda work_dir, args: __import__("cascade_sweep").measure(work_dir, args),
    "decisions": lambda work_dir, args: __import__("decisions").measure(work_dir, args),
    "chaos": lambda work_dir, args: __import__("chaos").measure(work_dir, args),
    "grids": lambda work_dir, args: {**kept(args.out, "grids"), "after": __import__("grids").measure(work_dir, args)},
    "hooks": lambda work_dir, args: __import__("hooks").measure(work_dir, args),
    "bm25s": lambda work_dir, args: __import__("bm25_compare").measure(work_dir, args),
    "million": lambda work_dir, args: __import__("million").measure(work_dir, args),
    "mlflow_genai": lambda work_dir, args: __import__("mlflow_genai").measure(work_dir, args),
    "local_model": lambda work_dir, args: __import__("local_model").measure(work_dir, args),
    "input_caps": lambda work_dir, args: __import__("input_caps").measure(work_dir, args),
}
OWN_INPUT = {"input_caps"}  # groups that write all they read (the others may read ../shared/data)


def racing_figures(work_dir: Path, args) -> dict:
    """Full grid vs racing sweep, offline and LLM judge (bench/racing.py; figures in bench/results/racing.md)."""
    from racing import measure

    return measure(work_dir, args)


def embedding_figures() -> dict:
    """texts/s, ndcg@10 and mrr per MiniLM backend and embedder=static (bench/embedding_backends.py)."""
    from embedding_backends import bench as embedding_bench

    return embedding_bench()


def main() -> None:
    """`python bench/run.py` measures every group; `python bench/run.py GROUP [GROUP ...]` only those
    (the other groups' figures stay as results.json has them); `triad` prints the triad figure."""
    import argparse

    parser = argparse.ArgumentParser(description="ragexp's speed and memory figures (bench/results.md)")
    parser.add_argument("groups", nargs="*", help=f"figure groups, of {', '.join(GROUPS)} (default: all), or triad alone")
    parser.add_argument("--limit", type=int, default=200, help="questions of the sweep's jobs (the corpus stays whole)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose code `judges` measures")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json", help="where the figures go")
    args = parser.parse_args()
    unknown = [g for g in args.groups if g not in (*GROUPS, "triad")]
    if unknown:
        parser.error(f"unknown group {', '.join(unknown)}; the groups: {', '.join(GROUPS)} (or triad alone)")
    if args.groups == ["triad"]:
        print(json.dumps(triad_throughput(Path(tempfile.mkdtemp(prefix="ragexp-bench-"))), indent=2))
        return
    chosen = [g for g in args.groups if g != "triad"] or list(GROUPS)
    if not HOTPOT.exists() and set(chosen) - OWN_INPUT:
        raise SystemExit(f"bench: {HOTPOT} not found (the benchmark reads ../shared/data)")
    if "judge_agreement" in chosen:  # its labelled sets must be given: say so before any group runs
        __import__("judge_agreement").sources_dir_of(args)
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results.update(machine=f"{os.cpu_count()} cores", date=time.strftime("%Y-%m-%d %H:%M"))
    for name in chosen:
        work_dir = Path(tempfile.mkdtemp(prefix="ragexp-bench-"))
        load = os.getloadavg()[0]
        results[name] = {**GROUPS[name](work_dir, args), "load_1min_before": round(load, 1)}
        shutil.rmtree(work_dir, ignore_errors=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")  # each group kept as it ends
    before = json.loads((ROOT / "bench" / "before.json").read_text())
    args.out.with_suffix(".md").write_text(markdown(results, before))
    print(markdown(results, before))


def judge_rows(judge: str) -> list[tuple[str, Callable[[dict], str | None], str]]:
    """Per concurrency: questions/s (share of the ceiling, mean in flight), CPU and first request."""
    def at(c: int, show: Callable[[dict], str]) -> Callable[[dict], str | None]:
        return lambda r: show(r["judges"][judge][str(c)]) if str(c) in r.get("judges", {}).get(judge, {}) else (
            before_llm(r, c) if judge == "llm" and show is throughput else None)

    def throughput(t: dict) -> str:
        return (f"{t['per_second']} ({t['share_of_ceiling']:.0%} of {t['ceiling']:g}; mean in flight "
                f"{t['mean_in_flight']}; load {t['load_1min']})")

    rows = [(f"{judge} judged questions/s at concurrency {c} ({QUESTIONS[judge][c]} questions, 200 ms)",
             at(c, throughput), ">= 80%" if judge == "llm" else "") for c in QUESTIONS[judge]]
    rows.append((f"{judge}: CPU ms per judged question at concurrency 1/8/16/32",
                 lambda r: " / ".join(str(t["cpu_ms_per_question"]) for t in r["judges"][judge].values())
                 if judge in r.get("judges", {}) else None, ""))
    rows.append((f"{judge}: first request after the judging stage starts, ms, at 1/8/16/32",
                 lambda r: " / ".join(str(t["first_request_ms"]) for t in r["judges"][judge].values())
                 if judge in r.get("judges", {}) else None, ""))
    return rows


def before_llm(r: dict, c: int) -> str | None:
    """Main's figure 5 (judge=local, cache off, 200 questions at each concurrency), if it has this one."""
    t = r.get("judge_throughput", {}).get(str(c))
    return f"{t['per_second']} ({t['share_of_ideal']:.0%} of {c / 0.2:g}; 200 questions, cache off, 0.1 s clock)" if t else None


def racing_rows() -> list[tuple[str, Callable[[dict], str | None], str]]:
    """Per judge: the race's question evaluations (and LLM requests) against the full grid's, its wall
    time, whether the full grid's winner survived (bench/racing.py; the rounds in results/racing.md)."""
    def share(judge: str, counter: str) -> Callable[[dict], str | None]:
        def show(f: dict) -> str:
            race, full, c = f["racing"][counter], f["full_grid"][counter], f["comparison"]
            return (f"{race} / {full} = {race / full:.2%} (wall {f['racing']['wall_s']} / {f['full_grid']['wall_s']} s; "
                    f"winner {'kept' if c['full_winner_survived'] else 'DROPPED'}; load {f['racing']['load_1min_before']}"
                    + (f"; {f['date']}" if "date" in f else "") + ")")
        return get("racing", judge, show=show)

    grid = "24 configurations x 500 HotpotQA questions"
    return [(f"racing, offline judge ({grid}): question evaluations, race / full grid", share("offline", "question_evaluations"),
             "<= 35%, winner kept"),
            (f"racing, LLM judge at 200 ms ({grid}): question evaluations, race / full grid", share("llm", "question_evaluations"),
             "<= 35%, winner kept"),
            ("racing, LLM judge at 200 ms: LLM requests, race / full grid", share("llm", "llm_requests"), "<= 35%")]


def get(*path: str, show: Callable[..., str]) -> Callable[[dict], str | None]:
    def value(r: dict) -> str | None:
        for part in path:
            if not isinstance(r, dict) or part not in r:
                return None
            r = r[part]
        return show(r)
    return value


def cascade_sweep_figures(c: dict) -> str:
    full, cascade, race = c["llm_full"], c["cascade_full"], c["cascade_racing"]
    return (f"{cascade['llm_requests']} / {full['llm_requests']} = {c['request_share']['cascade_full']:.1%} (winner "
            f"{cascade['winner']}, {'separated' if cascade['separated'] else 'not separated'}); race "
            f"{race['llm_requests']} / {full['llm_requests']} = {c['request_share']['cascade_racing']:.1%} (winner "
            f"{race['winner']}); full LLM grid's winner {full['winner']} ({c['questions']} questions; planted "
            f"{c['planted_winner']})")


def kept(results: Path, group: str) -> dict:
    """A group's figures as results.json has them (its "before" stays when "after" is measured again)."""
    return json.loads(results.read_text()).get(group, {}) if results.exists() else {}


def oversized_row_figures(c: dict, outcome: str) -> str:
    """An input_caps row: wall and peak RSS of the 50 MB answer's and context's commands, and the ordinary row alone's."""
    answer, context, alone = c[f"answer_50mb_{outcome}"], c[f"context_50mb_{outcome}"], c["ordinary_row_alone"]
    return (f"answer {answer['wall_s']} s, {answer['peak_rss_mb']} MB; context {context['wall_s']} s, "
            f"{context['peak_rss_mb']} MB (the ordinary row alone {alone['wall_s']} s, {alone['peak_rss_mb']} MB; "
            f"load {answer['load_1min'][0]} -> {context['load_1min'][1]})")


def grid_figures(g: dict) -> str:
    """A grids bench row: the ratio, then the phases and the peak."""
    return (f"{g['wall_over_jobs']}x ({g['wall_s']} / {g['jobs_own_s']} s); {g['before_first_job_s']} s; "
            f"{g.get('jobs_phase_s', '-')} s; {g.get('after_last_job_s', '-')} s; {g['peak_rss_mb_largest_child']} MB"
            + (f" (process tree {g['peak_rss_mb_tree']} MB)" if "peak_rss_mb_tree" in g else ""))


ROWS: list[tuple[str, Callable[[dict], str | None], str]] = [
    ("6-job sweep, cold", get("sweep", show=lambda s: f"{s['cold_s']} s"), ""),
    ("6-job sweep, warm", get("sweep", show=lambda s: f"{s['warm_s']} s ({s['speedup']}x faster)"), ">= 20x"),
    ("warm sweep: texts embedded / stages computed",
     get("sweep", show=lambda s: f"{s['warm_embedded_texts']} / {s['warm_stage_computations']}"), "0 / 0"),
    ("chunking runs in the sweep", get("sweep", "chunking_runs", show=str), "3"),
    ("corpus embedding runs in the sweep", get("sweep", "corpus_embedding_runs", show=str), "3"),
    ("cold sweep / embedding its distinct texts once", get("sweep", "distinct", show=lambda d: (
        f"{d['multiple']}x ({d['texts']} texts embedded alone in {d['embedding_s']} s)")), ""),
    ("default pipeline, 500 questions", get("full_run", show=lambda f: f"{f['run_s']} s"), ""),
    ("embedding its texts alone", get("full_run", show=lambda f: f"{f['embedding_alone_s']} s ({f['embedded_texts']} texts)"), ""),
    ("pipeline / embedding", get("full_run", "ratio", show=str), "<= 1.5"),
    ("peak RSS of that run", get("full_run", show=lambda f: f"{f['peak_rss_mb']} MB"), ""),
    ("python -m ragexp --help", get("help", show=lambda h: f"{h['best_s']} s (median {h['median_s']} s)"), "<= 0.15 s"),
    ("MLflow logging's cost on a default run (sample, cached stages, existing store)", get("logging", show=lambda m: (
        f"+{m['added_s']} s ({m['median_none_s']} -> {m['median_mlflow_s']} s, medians of {len(m['none_s'])})")), "<= 1 s"),
    ("the embedding map's cost on a default run (sample, cached stages)", get("embedding_map", show=lambda m: (
        f"+{m['added_s']} s ({m['off_s']} -> {m['on_s']} s, medians of 3)")), "<= 2 s"),
    *judge_rows("llm"),
    *judge_rows("triad"),
    ("monitor: 1,000,000 records, no judging", get("monitor", show=lambda m: (
        f"{m['records_per_s']:,} records/s (read {m['read_s']} s, command {m['wall_s']} s; "
        f"{m['records_per_cpu_s']:,} per CPU second; load {m['load_1min']})")), ">= 100,000/s"),
    ("monitor: peak RSS", get("monitor", show=lambda m: f"{m['peak_rss_mb']} MB"), "< 500 MB"),
    *racing_rows(),
    ("8 runs + 2 sweeps started together on a new store: repeats that kept to their own", get("chaos", show=lambda c: (
        f"{c['kept']} / {c['repeats']} (median {c['median_wall_s']} s a repeat; load {c['load_1min']})")), "20 / 20"),
    ("48-point sweep of cheap configurations: wall / its jobs' own time; before the first job; jobs phase; report; peak RSS",
     get("grids", "after", "48", show=grid_figures), "<= 3x; <= 12.4 s; ; ; <= 400 MB"),
    ("the same at dbf29a0 (2026-12-03 morning)", get("grids", "before", "48", show=grid_figures), ""),
    ("192-point sweep of the same: wall / jobs' own; before the first job; jobs phase; report; peak RSS",
     get("grids", "after", "192", show=grid_figures), "<= 3x; <= 19.6 s; ; ; <= 1.2x the 48-point peak"),
    ("python -m ragexp.compare on that 192-point sweep, later, from another folder (plots, 10,000 resamples)",
     get("grids", "after", "192", "compare_later_s", show=lambda s: f"{s} s"), "<= 15 s"),
    ("private hooks, 48-point sweep with one off - as shipped: the phase it acts on (before the first job, after the last)",
     get("hooks", "grid_48", show=lambda h: "; ".join(
         f"{hook} +{h[hook].get('gain_after_last_job_s', h[hook].get('gain_before_first_job_s'))} s (wall "
         f"+{h[hook]['gain_wall_s']} s)" for hook in ("shared_defaults", "composed_once", "quick_exit")) + (
         f"; as shipped {h['none']['wall_s']} s ({h['none']['before_first_job_s']} / {h['none']['after_last_job_s']} s; "
         f"load {h['none']['load_1min']})")), "> 0 each (docs/contributing/private-hooks.md)"),
    ("private hooks: a 500-question folder's traces logged one start_trace each - in one transaction", get(
        "hooks", "traces", show=lambda t: f"+{t['gain_s']} s ({t['log_folder_s']}; load {t['load_1min']})"
        if "gain_s" in t else t.get("skipped")), "> 0"),
    ("48-point sweep on joblib's 2 workers / the basic launcher", get("grids", "after", "48-joblib-2", show=lambda g: (
        f"{g['over_basic']}x ({g['wall_s']} / {g['basic_wall_s']} s)")), "<= 0.75x"),
    ("deadlines: the triad's two rounds / two round trips", get("deadlines", show=lambda d: (
        f"{d['triad_over_two_round_trips']}x ({d['triad_8_judging_s']} / {d['two_round_trips_s']} s)")), "<= 1.15x"),
    ("deadlines: the triad's judging stage in python -m ragexp (median of 5) / two round trips", get("deadlines", show=lambda d: (
        f"{d['triad_cli_over_two_round_trips']}x ({d['triad_cli_judging_s']} / {d['two_round_trips_s']} s; load "
        f"{d['triad_cli_load_1min']})") if "triad_cli_judging_s" in d else None), "<= 1.15x at load < 2"),
    ("the default offline judge, 100 paraphrased HotpotQA rows of 5 paragraphs, cold caches: judging rows/s (whole command)",
     get("cheap_judge", show=lambda c: "; ".join(
         f"{label} {c[key]['judging_rows_per_s']} ({c[key]['rows_per_s']}; load {c[key]['load_1min']})"
         for key, label in (("before", "before"), ("as_is", "now"), ("at_load_2x_cores", "now at a load of 2x the cores"))
         if key in c)), ">= 10"),
    ("24 systems, planted winner: LLM requests of a cascade at 10% / of a race of cascades, over the full LLM grid's",
     get("cascade_sweep", show=cascade_sweep_figures), "same winner, separated; race <= 5%"),
    ("short answers held out, judge=offline: false alarms / recall", get("short_answers", "offline", "all", show=lambda a: (
        f"{a['false_alarms']} / {a['recall']} ({a['supported']} supported, {a['unsupported']} not)")), "<= 0.05 / >= 0.90"),
    ("monitor A/B, A/A streams read after each of 30 windows: any wrong decision, per metric (worst) / all 4 corrected",
     get("decisions", "ab", "aa", show=lambda a: (
         f"{max(a['sequential_alone'].values()):.1%} / {a['sequential_all_corrected']:.1%} (naive daily z-test "
         f"{max(a['naive_daily'].values()):.1%} / {a['naive_daily_any']:.1%}; fixed-ratio rules any "
         f"{a['fixed_ratio_any']:.1%})")), "<= 5% / <= 5%"),
    ("monitor A/B power: largest gap between the share decided and the planner's promise", get("decisions", "ab", "power",
     show=lambda rows: f"{max(abs(r['gap_points']) for r in rows):.1f} points over {len(rows)} (effect, records) cells"),
     "<= 5 points"),
    ("recorded outputs with a 50 MB answer / context, refused (on_error=stop), whole command: wall, peak RSS (medians of 3)",
     get("input_caps", show=lambda c: oversized_row_figures(c, "refused")), "< 10 s, < 300 MB"),
    ("the same, counted and skipped (on_error=skip; the ordinary row judged)",
     get("input_caps", show=lambda c: oversized_row_figures(c, "skipped")), "< 10 s, < 300 MB"),
    ("a 10,000-point -m grid: refused (exit 2) after; left in its folder (median of 3)", get("input_caps", "grid_10000_refused",
     show=lambda g: f"{g['wall_s']} s; {', '.join(g['left_behind']) or 'nothing'} (load {g['load_1min'][0]} -> {g['load_1min'][1]})"),
     "< 5 s; nothing"),
    ("a 1,000-point -m grid: its size line / its first progress line after (median of 3)", get(
        "input_caps", "grid_1000_first_lines", show=lambda g: (f"{g['size_line_s']} s / {g['progress_line_s']} s (load "
                                                              f"{g['load_1min'][0]} -> {g['load_1min'][1]})")), "< 5 s each"),
    ("tracing=on: 200-question run (BM25, offline judge, MLflow), off / on", get("tracing", show=lambda t: (
        f"{t['off_s']} s / {t['on_s']} s ({t['overhead']:+.1%}; traces written in {t['traces_written_s']} s; "
        f"load {t['load_1min']})")), "<= +10%"),
]


def markdown(r: dict, before: dict) -> str:
    """The figures of this checkout (`r`, results.json) beside main's of 2026-11-30 (`before`,
    before.json); "-" where a side has no such figure."""
    lines = [f"ragexp benchmark, {r.get('date')}, {r.get('machine')}; before: main on {before.get('date')}",
             "", "| figure | before | now | goal |", "| --- | --- | --- | --- |"]
    for name, value, goal in ROWS:
        lines.append(f"| {name} | {value(before) or '-'} | {value(r) or '-'} | {goal} |")
    loads = {g: r[g]["load_1min_before"] for g in GROUPS if isinstance(r.get(g), dict) and "load_1min_before" in r[g]}
    lines += ["", "1-minute load when each group started: " + ", ".join(f"{g} {v}" for g, v in loads.items())]
    if "embedding" in r:  # bench/embedding_backends.py's table
        from embedding_backends import table as embedding_table

        lines += ["", f"Embedding on the HotpotQA dev500 paragraphs ({r['embedding'].get('date')}, `python bench/run.py embedding`):",
                  "", embedding_table(r["embedding"]).rstrip("\n")]
    return "\n".join(lines) + "\n" + group_pages()


def group_pages() -> str:
    """The figure groups that keep their own page (bench/results/GROUP.md: the command, the load, the
    tables and how to read them), listed at the end of results.md with each page's first heading."""
    pages = sorted((Path(__file__).parent / "results").glob("*.md"))
    lines = ["", "Figure groups with a page of their own (the commands, the load and the tables):", ""]
    for page in pages:
        title = next((line.lstrip("# ").strip() for line in page.read_text().splitlines() if line.startswith("#")), page.stem)
        lines.append(f"- [{title}](results/{page.name})")
    return "\n".join(lines) + "\n" if pages else ""


if __name__ == "__main__":
    main()
