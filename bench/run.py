"""`make bench`: ragexp's speed and memory figures on ../shared/data/hotpotqa_ircot_dev500.

Writes bench/results.json and bench/results.md and prints them. Each figure is measured once,
in one run on this machine:
1. cold vs warm time of a 6-job sweep (3 chunkers x 2 retrievers, dataset.limit=200), and the
   embedding calls of the warm one (goal: warm >= 20x faster, 0 embeddings, 0 LLM requests);
2. how many times chunking and corpus embedding ran in the cold sweep (goal: 3 each, not 6);
3. the default pipeline on all 500 questions divided by embedding the same texts alone with the
   same model (goal: <= 1.5), and that run's peak memory (RSS);
4. wall time of `python -m ragexp --help` (goal: < 1.5 s);
5. judged questions per second against a local OpenAI-protocol server with 200 ms latency at
   concurrency 1, 8, 32 (goal: >= 80% of concurrency / latency);
   `python bench/run.py triad` measures the triad alone: judged questions/s at concurrency 16 on
   50 questions against the same server (this checkout's code);
6. `python -m ragexp.monitor` on a generated 1,000,000-record log, without judging: records per
   second and peak RSS (goal: >= 100,000 records/s, < 500 MB).

7. the cost of `tracing=on`: wall time of a 200-question run (BM25, offline judge, logged to a
   SQLite store) without and with it (goal: at most 10% slower); `python bench/run.py tracing`
   measures it alone.

`python bench/run.py monitor` measures figure 6 alone (the others are kept from results.json)."""
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()
SWEEP = ["chunker=fixed,recursive,sentence", "retriever=dense,bm25"]


def ragexp(*args: str, cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's code, whatever the venv's editable install
    proc = subprocess.run([sys.executable, "-m", "ragexp", *args], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"bench: ragexp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started, proc.stdout + proc.stderr


def work_lines(stdout: str) -> list[dict[str, int]]:
    """The `work:` line each job prints: what it computed or took from the cache."""
    return [{k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)} for line in re.findall(r"work: (.*)", stdout)]


def sweep(work_dir: Path) -> dict:
    args = ["-m", *SWEEP, "dataset=hotpotqa", f"dataset.path={HOTPOT}", "dataset.limit=200", "tracker=none"]
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
    }


def full_run_vs_embedding() -> dict:
    """The default pipeline on all 500 questions, in this process (cache off), then the texts it
    embedded, embedded again alone with the same model."""
    from hydra import compose, initialize_config_dir

    from ragexp import embedders
    from ragexp.pipeline import run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["dataset=hotpotqa", f"dataset.path={HOTPOT}",
                                                       "tracker=none", "cache.enabled=false"])
    started = time.perf_counter()
    result = run(cfg)
    run_s = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    [(key, memo)] = embedders._MEMO.items()
    texts = list(memo)
    model = embedders.load_sentence_transformer(key.split(":", 1)[1], "cpu")
    started = time.perf_counter()
    ordered = sorted(texts, key=len, reverse=True)
    for start in range(0, len(ordered), 64):
        model.encode(ordered[start : start + 64], batch_size=64, show_progress_bar=False)
    embed_s = time.perf_counter() - started
    return {"questions": result.aggregates["total_questions"], "overall_score": result.aggregates.get("overall_score"),
            "run_s": round(run_s, 1), "embedded_texts": len(texts), "embedding_alone_s": round(embed_s, 1),
            "ratio": round(run_s / embed_s, 2), "peak_rss_mb": round(peak_mb), "stage_s": result.timings}


def help_time(work_dir: Path) -> dict:
    times = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "ragexp", "--help"], cwd=work_dir, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return {"best_s": round(min(times), 3), "median_s": round(sorted(times)[2], 3)}


def judge_throughput(work_dir: Path) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    figures = {}
    with OpenAIServer(latency=0.2) as server:
        for concurrency in (1, 8, 32):
            _, out = ragexp("dataset=hotpotqa", f"dataset.path={HOTPOT}", "dataset.limit=200", "retriever=bm25",
                            "tracker=none", "cache.enabled=false", "judge=local",
                            f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.max_concurrency={concurrency}",
                            cwd=work_dir)
            judged = len(server.chat_requests())
            server.requests = []
            seconds = float(re.search(r"judging: ([\d.]+)s", out).group(1))  # the pipeline's stage clock
            per_second = judged / seconds
            figures[concurrency] = {"requests": judged, "judging_s": round(seconds, 2), "per_second": round(per_second, 1),
                                    "share_of_ideal": round(per_second / (concurrency / 0.2), 3)}
    return figures


def triad_throughput(work_dir: Path, questions: int = 50, concurrency: int = 16) -> dict:
    """`judge=triad` judged questions/s (the judging stage's clock) against the 200 ms server, this
    checkout's code (PYTHONPATH), hash embedders and bm25 so that only the judging counts."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={questions}", "retriever=bm25",
            "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none", "cache.enabled=false",
            "judge=triad", "weights=triad", "judge.endpoint.api_key_env=null",
            f"judge.endpoint.max_concurrency={concurrency}"]
    with OpenAIServer(latency=0.2) as server:
        proc = subprocess.run([sys.executable, "-m", "ragexp", *args, f"judge.endpoint.base_url={server.base_url}"],
                              cwd=work_dir, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"bench: the triad run failed:\n{proc.stderr[-3000:]}")
        arrivals = [r["time"] for r in server.chat_requests()]
        requests, max_in_flight = len(arrivals), server.max_in_flight
    seconds = float(re.search(r"judging: ([\d.]+)s", proc.stdout + proc.stderr).group(1))
    return {"questions": questions, "concurrency": concurrency, "requests": requests, "max_in_flight": max_in_flight,
            "judging_s": round(seconds, 2), "per_second": round(questions / seconds, 1),
            "first_to_last_reply_s": round(max(arrivals) - min(arrivals) + 0.2, 2),  # the server's view, no start-up
            "ceiling": round(concurrency / 0.2 / (requests / questions), 1), "load_1min": round(os.getloadavg()[0], 1)}


def monitor_throughput(work_dir: Path, records: int = 1_000_000) -> dict:
    """The monitor on a generated log (ragexp.monitor.synthetic), no judging, tracker=none: its own
    read-and-summarise time and the whole command's wall time and peak RSS (os.wait4 of that child)."""
    from ragexp.monitor.synthetic import generate

    log = generate(work_dir / "traffic.jsonl", records, span="30d", degrade_from="0.9", slower=2, errors=0.05)
    out = work_dir / "monitor-out"
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ragexp.monitor", f"monitor.input={log}", "monitor.window=1d",
                             "monitor.judge_sample=0", "tracker=none", f"hydra.run.dir={out}"], cwd=work_dir,
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
    on, off (the machine's drift cancels out); the mean of each."""
    args = ["dataset=hotpotqa", f"dataset.path={HOTPOT}", f"dataset.limit={questions}", "retriever=bm25",
            "cache.enabled=false", f"tracker.tracking_uri=sqlite:///{work_dir / 'tracing.db'}"]
    times: dict[str, list[float]] = {"off": [], "on": []}
    for mode in ("off", "on", "on", "off"):
        seconds, _ = ragexp(*args, f"tracing={mode}", f"hydra.run.dir={work_dir / f'tracing-{len(times[mode])}-{mode}'}",
                            cwd=work_dir)
        times[mode].append(round(seconds, 1))
    off, on = (sum(times[m]) / len(times[m]) for m in ("off", "on"))
    traces = sum(1 for _ in (work_dir / "tracing-0-on" / "traces.jsonl").open())
    return {"questions": questions, "traces": traces, "off_s": times["off"], "on_s": times["on"],
            "overhead": round(on / off - 1, 3), "load_1min": round(os.getloadavg()[0], 1)}


def main() -> None:
    if sys.argv[1:] == ["tracing"]:
        print(json.dumps(tracing_cost(Path(tempfile.mkdtemp(prefix="ragexp-bench-"))), indent=2))
        return
    if sys.argv[1:] == ["monitor"]:
        work_dir = Path(tempfile.mkdtemp(prefix="ragexp-bench-"))
        results_file = ROOT / "bench" / "results.json"
        results = json.loads(results_file.read_text()) if results_file.exists() else {}
        results["monitor"] = monitor_throughput(work_dir)
        shutil.rmtree(work_dir, ignore_errors=True)
        results_file.write_text(json.dumps(results, indent=2) + "\n")
        (ROOT / "bench" / "results.md").write_text(markdown(results))
        print(markdown(results))
        return
    if sys.argv[1:] == ["triad"]:
        print(json.dumps(triad_throughput(Path(tempfile.mkdtemp(prefix="ragexp-bench-"))), indent=2))
        return
    if not HOTPOT.exists():
        raise SystemExit(f"bench: {HOTPOT} not found (the benchmark reads ../shared/data)")
    work_dir = Path(tempfile.mkdtemp(prefix="ragexp-bench-"))
    results = {"machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d %H:%M")}
    results["help"] = help_time(work_dir)
    results["sweep"] = sweep(work_dir)
    results["judge_throughput"] = judge_throughput(work_dir)
    results["triad_throughput"] = triad_throughput(work_dir)
    results["full_run"] = full_run_vs_embedding()
    results["monitor"] = monitor_throughput(work_dir)
    results["tracing"] = tracing_cost(work_dir)
    shutil.rmtree(work_dir, ignore_errors=True)
    out = ROOT / "bench"
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(markdown(results))
    print(markdown(results))


def markdown(r: dict) -> str:
    s, f, h = r["sweep"], r["full_run"], r["help"]
    rows = [
        ("6-job sweep, cold", f"{s['cold_s']} s", ""),
        ("6-job sweep, warm", f"{s['warm_s']} s ({s['speedup']}x faster)", ">= 20x"),
        ("warm sweep: texts embedded / stages computed", f"{s['warm_embedded_texts']} / {s['warm_stage_computations']}", "0 / 0"),
        ("chunking runs in the sweep", str(s["chunking_runs"]), "3"),
        ("corpus embedding runs in the sweep", str(s["corpus_embedding_runs"]), "3"),
        (f"default pipeline, {f['questions']} questions", f"{f['run_s']} s", ""),
        (f"embedding its {f['embedded_texts']} texts alone", f"{f['embedding_alone_s']} s", ""),
        ("pipeline / embedding", str(f["ratio"]), "<= 1.5"),
        ("peak RSS of that run", f"{f['peak_rss_mb']} MB", ""),
        ("python -m ragexp --help", f"{h['best_s']} s (median {h['median_s']} s)", "< 1.5 s"),
    ]
    for c, t in r["judge_throughput"].items():
        rows.append((f"judged questions/s at concurrency {c} (200 ms latency)",
                     f"{t['per_second']} ({t['share_of_ideal']:.0%} of {int(c) / 0.2:g})", ">= 80%"))
    if "triad_throughput" in r:
        t = r["triad_throughput"]
        rows.append((f"triad judged questions/s at concurrency {t['concurrency']} ({t['questions']} questions, 200 ms)",
                     f"{t['per_second']} ({t['requests']} requests, ceiling {t['ceiling']}; load {t['load_1min']})", ""))
    if "monitor" in r:
        m = r["monitor"]
        rows.append((f"monitor: {m['records']:,} records ({m['file_mb']} MB JSONL), no judging",
                     f"{m['records_per_s']:,} records/s (read {m['read_s']} s, command {m['wall_s']} s; "
                     f"{m['records_per_cpu_s']:,} per CPU second; load {m['load_1min']})", ">= 100,000/s"))
        rows.append(("monitor: peak RSS", f"{m['peak_rss_mb']} MB", "< 500 MB"))
    if "tracing" in r:
        t = r["tracing"]
        rows.append((f"tracing=on: {t['questions']}-question run (BM25, offline judge, MLflow), off / on",
                     f"{t['off_s']} s / {t['on_s']} s ({t['overhead']:+.1%}; load {t['load_1min']})", "<= +10%"))
    lines = [f"ragexp benchmark, {r['date']}, {r['machine']}", "", "| figure | measured | goal |", "| --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
