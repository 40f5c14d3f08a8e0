"""Figure group `mlflow_genai` (python bench/run.py mlflow_genai): what the per-question records in
MLflow cost, on 500 HotpotQA questions (BM25, the model-free scoring embedder, the offline judge).

One run folder is made with `tracker=none`, then logged with `python -m ragexp.track`'s code path
(MlflowTracker.log_folder) ROUNDS times each way, alternating: `tracker.question_records=false`
(params, metrics, artifacts, the table) and the default (the same, and one light trace per question),
to a SQLite store and to an `mlflow server` over another one. The figure is the median difference
per question (goal: <= 5 ms per question on the SQLite store)."""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from ragexp.config.build import from_yaml

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()
ROUNDS = 3
sys.path.insert(0, str(ROOT / "tests"))


def timed_logs(folder: Path, uri: str, rounds: int) -> dict[str, list[float]]:

    times: dict[str, list[float]] = {"without": [], "with": []}
    trackers = {way: from_yaml("tracker/mlflow", tracking_uri=uri, question_records=way == "with") for way in times}
    trackers["with"].client()  # the store made and opened before anything is timed
    for _ in range(rounds):
        for way, tracker in trackers.items():
            started = time.perf_counter()
            tracker.log_folder(folder)
            times[way].append(round(time.perf_counter() - started, 3))
    return times


def per_question_ms(times: dict[str, list[float]], questions: int) -> float:
    return round((statistics.median(times["with"]) - statistics.median(times["without"])) / questions * 1000, 2)


def measure(work_dir: Path, args=None) -> dict:
    from conftest import mlflow_server

    if not HOTPOT.is_dir():
        return {"skipped": f"{HOTPOT} is absent"}
    folder = work_dir / "run500"
    proc = subprocess.run([sys.executable, "-m", "ragexp", "dataset=hotpotqa", f"dataset.path={HOTPOT}",
                           "dataset.limit=500", "retriever=bm25", "embedder=hash", "embedder@scoring_embedder=hash",
                           "tracker=none", "cache.enabled=false", f"hydra.run.dir={folder}"],
                          cwd=work_dir, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"bench mlflow_genai: the run failed:\n{proc.stderr[-3000:]}")
    questions = sum(1 for _ in (folder / "questions.jsonl").open())
    sqlite = timed_logs(folder, f"sqlite:///{work_dir / 'genai.db'}", ROUNDS)
    with mlflow_server(f"sqlite:///{work_dir / 'served.db'}", work_dir / "server") as url:
        served = timed_logs(folder, url, ROUNDS)
    return {"questions": questions, "sqlite_s": sqlite, "sqlite_ms_per_question": per_question_ms(sqlite, questions),
            "server_s": served, "server_ms_per_question": per_question_ms(served, questions),
            "load_1min": round(os.getloadavg()[0], 1)}
