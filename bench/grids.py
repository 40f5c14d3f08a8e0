"""Figure group `grids` (python bench/run.py grids): what a sweep costs beyond its jobs' own work.
A grid of cheap configurations (`embedder=hash embedder@scoring_embedder=hash retriever=bm25
dataset.limit=10`, 4 chunkers x 3 chunk sizes x 4 top_k = 48 points) on the bundled sample, a fresh
MLflow SQLite store and stage cache, Hydra's basic launcher: the sweep's wall time, the sum of its
jobs' own `job_time_s` (from a job's start to its results written, before logging) and their
ratio (goal: <= 3), the time before the first job starts (goal: <= 10 s + 0.05 s per point), the
jobs phase (first job's start to the last job's run logged) and what follows it (the report), and
the peak RSS of the largest process and of the whole process tree (summed over its processes,
sampled every 0.1 s; goal: <= 400 MB); on 192 points or more, `python -m ragexp.compare`
later from another folder (goal: <= 15 s at 192). RAGEXP_BENCH_GRID_POINTS=8,48,192 measures those
grids (default 48)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRIDS = {  # points -> the swept overrides
    8: ["chunker=recursive,sentence,token,fixed", "retriever.top_k=3,5"],
    48: ["chunker=recursive,sentence,token,fixed", "chunker.chunk_size=300,500,700", "retriever.top_k=2,3,4,5"],
    192: ["chunker=recursive,sentence,token,fixed", "chunker.chunk_size=300,400,500,600,700,800",
          "retriever.top_k=2,3,4,5,6,7,8,9"],
}
CHEAP = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=10"]


def sweep(work_dir: Path, points: int, launcher: list[str] | None = None, entry: list[str] | None = None,
          name: str = "") -> dict:
    """The `points`-point grid's figures; `entry`: what runs instead of `-m ragexp` (bench/hooks.py)."""
    sweep_dir = work_dir / f"sweep-{points}{'-parallel' if launcher else ''}{name}"
    args = [sys.executable, *(entry or ["-m", "ragexp"]), "-m", *CHEAP, *GRIDS[points], *(launcher or []), f"hydra.sweep.dir={sweep_dir}",
            f"tracker.tracking_uri=sqlite:///{sweep_dir}.db", f"cache.dir={sweep_dir}-cache"]
    started = time.time()
    proc = subprocess.Popen([sys.executable, "-c", ALONE, *args], cwd=work_dir, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree = TreePeak(proc.pid)
    _, err = proc.communicate()
    wall = time.time() - started
    tree.stop()
    if proc.returncode != 0:
        raise SystemExit(f"bench: the {points}-point sweep failed:\n{err[-3000:]}")
    err, _, peak_kb = err.rpartition(PEAK)
    peak_mb = int(peak_kb) // 1024
    metas = [json.loads(p.read_text()) for p in sweep_dir.glob("*/run.json")]
    assert len(metas) == points, f"{len(metas)} of {points} jobs wrote run.json"
    job_time = sum(m["job_time_s"] for m in metas)
    first = min(m["started"] for m in metas)
    last_logged = jobs_logged_by(Path(f"{sweep_dir}.db"))
    compared = compare_later(work_dir, sweep_dir) if points >= 192 and not launcher else {}
    return {**compared, "points": points, "wall_s": round(wall, 1), "jobs_own_s": round(job_time, 1),
            "wall_over_jobs": round(wall / job_time, 2), "before_first_job_s": round(first - started, 1),
            "jobs_phase_s": round(last_logged - first, 1), "after_last_job_s": round(started + wall - last_logged, 1),
            "peak_rss_mb_largest_child": peak_mb, "peak_rss_mb_tree": tree.peak_mb, "load_1min": round(os.getloadavg()[0], 1)}


PEAK = "\nlargest process, KB: "
# the sweep run by a small parent that says the largest resident size of any of its descendants (its
# own figure: this bench's process has run other sweeps before)
ALONE = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
         f"sys.stderr.write({PEAK!r} + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(code)")


class TreePeak:
    """The largest sum of resident memory of a process's descendants (the sweep, joblib's workers),
    sampled every 0.1 s from /proc while it runs (Linux; see `resident_mb`); `with_root`: the process
    itself counted too."""

    def __init__(self, pid: int, with_root: bool = False):
        import threading

        self.pid, self.peak_mb, self.done = pid, 0, threading.Event()
        self.first = 0 if with_root else 1
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.done.wait(0.1):  # by default the sweep's processes: the small parent (ALONE) left out
            self.peak_mb = max(self.peak_mb, resident_mb(memory_of(tree_of(self.pid)[self.first:])))

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


def tree_of(root: int) -> list[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return found


def memory_of(pids: list[int]) -> dict[int, tuple[int, int, int]]:
    """pid -> (its parent, its virtual size in bytes, its resident pages), from /proc/PID/stat; a
    process gone meanwhile is left out."""
    memory = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            memory[pid] = (int(fields[1]), int(fields[20]), int(fields[21]))
        except (OSError, IndexError, ValueError):
            continue
    return memory


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def resident_mb(memory: dict[int, tuple[int, int, int]], page_bytes: int = PAGE_BYTES) -> int:
    """The MB resident in the processes of `memory` (see `memory_of`), a child whose virtual and resident
    sizes are its parent's counted once: between fork or vfork and exec it is its parent's memory, not
    more of it (Python's subprocess vforks: a `git` that ragexp runs was read as a second copy of ragexp)."""
    pages = sum(resident for pid, (parent, virtual, resident) in memory.items()
                if memory.get(parent, (None, None, None))[1:] != (virtual, resident))
    return pages * page_bytes // 2**20


def compare_later(work_dir: Path, sweep_dir: Path) -> dict:
    """`python -m ragexp.compare` on the finished sweep, later, from another folder, with its defaults
    (plots, 10,000 resamples), reading the store (goal at 192 points: <= 15 s)."""
    elsewhere = work_dir / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "ragexp.compare", "--tracking-uri", f"sqlite:///{sweep_dir}.db"],
                          cwd=elsewhere, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench: compare failed:\n{proc.stderr[-3000:]}")
    return {"compare_later_s": round(time.time() - started, 1)}


def jobs_logged_by(database: Path) -> float:
    """When the last job's MLflow run ended (the jobs phase ends there; the report follows)."""
    import sqlite3

    with sqlite3.connect(database) as connection:
        [(end_ms,)] = connection.execute(
            "SELECT MAX(end_time) FROM runs WHERE run_uuid IN "
            "(SELECT run_uuid FROM tags WHERE key = 'mlflow.parentRunId')").fetchall()
    return end_ms / 1000


PARALLEL = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def measure(work_dir: Path, args=None) -> dict:
    """Each grid with the basic launcher; with RAGEXP_BENCH_GRID_PARALLEL=1 also with joblib's 2
    workers (goal: <= 0.75x the basic launcher's wall)."""
    points = [int(p) for p in os.environ.get("RAGEXP_BENCH_GRID_POINTS", "48").split(",")]
    figures: dict = {str(n): sweep(work_dir, n) for n in points}
    if os.environ.get("RAGEXP_BENCH_GRID_PARALLEL"):
        for n in points:
            parallel = sweep(work_dir, n, PARALLEL)
            parallel["basic_wall_s"] = figures[str(n)]["wall_s"]
            parallel["over_basic"] = round(parallel["wall_s"] / figures[str(n)]["wall_s"], 2)
            figures[f"{n}-joblib-2"] = parallel
    return figures


if __name__ == "__main__":
    import tempfile

    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-grids-"))), indent=2))
