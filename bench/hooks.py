"""Figure group `hooks` (python bench/run.py hooks): what each private hook of a dependency that
ragexp keeps for speed gains (docs/contributing/private-hooks.md), measured by switching it off:

- the 48-point cheap grid of bench/grids.py, run as is, then with one hook off at a time:
  `shared_defaults` (ragexp.sweep.composed.SharedDefaults: Hydra's `create_defaults_list` and
  `ConfigLoaderImpl._compose_config_from_defaults_list` shared by the points that choose the same
  options), `composed_once` (ComposedOnce keeping each point's composition for Hydra's check and the
  launcher: the loader's `load_sweep_config` replaced on the instance) and `quick_exit`
  (ragexp.__main__.command's end: `threading._shutdown`, `atexit._run_exitfuncs`, then `os._exit`,
  instead of the interpreter's teardown); each: the sweep's wall, the time before its first job and
  after its last job's run was logged, and the gain on the phase the hook acts on (`PHASE`);
- `one_transaction` (ragexp.store.trace_store.start_traces on a SQL store: the rows of MLflow's
  `start_trace` written in one transaction through `_get_store`, `_check_experiment_is_active`,
  `_get_trace_artifact_location_tag` and MLflow's table models): a 500-question run folder's traces
  logged to a SQLite store with it and with one `TracingClient.start_trace` per trace, alternating.

The hooks are switched off in the measured process only (a small driver), never by a setting."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()

# `python -c DRIVER HOOK ARGS...`: python -m ragexp ARGS with HOOK off ("none": as shipped)
DRIVER = """
import sys
off = sys.argv.pop(1)
from ragexp.sweep import composed
if off == "shared_defaults":
    class Unshared:  # Hydra's own composition for every point
        def close(self):
            pass
    composed.SharedDefaults = Unshared
elif off == "composed_once":  # no point kept: ragexp's check, Hydra's and the launcher's each compose it
    kept = composed.ComposedOnce.__init__
    composed.ComposedOnce.__init__ = lambda self, loader, keep=True: kept(self, loader, keep=False)
sys.argv[0] = "ragexp"
from ragexp.__main__ import command, main
main() if off == "quick_exit" else command()  # main: the interpreter's own end follows
"""
HOOKS = ("none", "shared_defaults", "composed_once", "quick_exit")


def grid_hooks(work_dir: Path, points: int = 48) -> dict:
    from grids import sweep

    figures = {}
    for hook in HOOKS:
        measured = sweep(work_dir, points, entry=["-c", DRIVER, hook], name=f"-{hook}")
        figures[hook] = {k: measured[k] for k in ("wall_s", "jobs_own_s", "before_first_job_s", "after_last_job_s",
                                                  "load_1min")}
    base = figures["none"]
    for hook in HOOKS[1:]:
        phase = PHASE[hook]
        figures[hook]["gain_wall_s"] = round(figures[hook]["wall_s"] - base["wall_s"], 1)
        figures[hook][f"gain_{phase}"] = round(figures[hook][phase] - base[phase], 1)
    return figures


# the phase of the sweep a hook acts on: its gain there is the figure to read (the jobs' own time varies with the load)
PHASE = {"shared_defaults": "before_first_job_s", "composed_once": "before_first_job_s", "quick_exit": "after_last_job_s"}


def per_trace(infos: list, retry) -> None:
    """start_traces without the hook: one `TracingClient.start_trace` a trace (MLflow's public route)."""
    from mlflow.tracing.client import TracingClient

    tracing = TracingClient()
    for info in infos:
        retry(tracing.start_trace, info)


def one_transaction(work_dir: Path, questions: int = 500, rounds: int = 2) -> dict:
    from ragexp.store import trace_store
    from ragexp.store.trackers import MlflowTracker

    if not HOTPOT.is_dir():
        return {"skipped": f"{HOTPOT} is absent"}
    folder = work_dir / "traced"
    proc = subprocess.run([sys.executable, "-m", "ragexp", "dataset=hotpotqa", f"dataset.path={HOTPOT}",
                           f"dataset.limit={questions}", "retriever=bm25", "embedder=hash", "embedder@scoring_embedder=hash",
                           "tracker=none", "cache.enabled=false", f"hydra.run.dir={folder}"],
                          cwd=work_dir, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise SystemExit(f"bench hooks: the run failed:\n{proc.stderr[-3000:]}")
    tracker = MlflowTracker(tracking_uri=f"sqlite:///{work_dir / 'traces.db'}")
    tracker.client()  # the store made and opened before anything is timed
    real = trace_store.start_traces
    times: dict[str, list[float]] = {"one_transaction": [], "per_trace": []}
    try:
        for _ in range(rounds):
            for way in times:
                trace_store.start_traces = real if way == "one_transaction" else per_trace
                started = time.perf_counter()
                tracker.log_folder(folder)
                times[way].append(round(time.perf_counter() - started, 2))
    finally:
        trace_store.start_traces = real
    best = {way: min(t) for way, t in times.items()}
    return {"questions": questions, "log_folder_s": times, "gain_s": round(best["per_trace"] - best["one_transaction"], 2),
            "load_1min": round(os.getloadavg()[0], 1)}


def measure(work_dir: Path, args=None) -> dict:
    return {"grid_48": grid_hooks(work_dir), "traces": one_transaction(work_dir)}


if __name__ == "__main__":
    import json
    import tempfile

    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT))
    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-hooks-"))), indent=2))
