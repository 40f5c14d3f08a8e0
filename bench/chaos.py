"""Figure group `chaos` (python bench/run.py chaos): the long version of tests/test_chaos.py. Eight
CLI runs and two two-point sweeps started in the same second on one new SQLite MLflow store and
one stage cache, 20 times: how many repeats kept every run to its own folder, params and scores
with nothing lost and no store broken (goal: 20 of 20), and the wall time of a repeat."""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def measure(work_dir: Path, args=None, repeats: int = 20) -> dict:
    from test_chaos import test_eight_runs_and_two_sweeps_started_together_keep_to_their_own as scenario

    walls, failures = [], []
    for repeat in range(repeats):
        started = time.perf_counter()
        try:
            scenario(Path(tempfile.mkdtemp(dir=work_dir)), repeat)
        except AssertionError as err:
            failures.append(f"repeat {repeat}: {str(err).splitlines()[0][:300]}")
        walls.append(time.perf_counter() - started)
    return {"repeats": repeats, "kept": repeats - len(failures), "failures": failures,
            "median_wall_s": round(statistics.median(walls), 1), "load_1min": round(os.getloadavg()[0], 1)}
