"""Figure group `input_caps` (python bench/run.py input_caps): what the caps on oversized input hold
through the whole command, each figure the median of RUNS (3) runs, each in a fresh folder (no stage
cache, no store), with the 1-minute load at the start and the end of its runs:

- field: recorded outputs run as docs/get-started/own-system.md runs them (`python -m ragexp
  dataset=outputs dataset.path=FILE tracker=none`), FILE one ordinary row and one whose answer, or
  whose one context, holds 50 MB: refused (`dataset.on_error=stop`, exit 2) and counted and skipped
  (`dataset.on_error=skip`: the ordinary row judged, exit 0). The command's wall seconds to its exit
  and its peak RSS (goal: < 10 s, < 300 MB): the larger of its largest process's (wait4) and its
  process tree's (summed, sampled every 0.1 s: grids.TreePeak). Beside them the same command on the
  ordinary row alone: what the 50 MB row adds (the cases taken in turn, run after run);
- grid: `python -m ragexp -m` over 10,000 points (100 retriever.top_k x 100 chunker.chunk_size):
  seconds to its exit 2 and what it left in its folder (goal: < 5 s, nothing: no job, no store); over
  1,000 points (10 x 100): seconds from its start to its size line and to its first progress line
  (goal: < 5 s each), then it is stopped (tests/test_grid_cap.py reads the lines the same way)."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
RUNS = 3
FIELD_BYTES = 50_000_000
ORDINARY = {"id": "port", "question": "Which port does quarryd listen on?",
            "contexts": ["quarryd listens on port 7070."], "answer": "Port 7070.", "reference": "7070"}
RECORDED = ("dataset=outputs", "tracker=none")  # with dataset.path=FILE: as docs/get-started/own-system.md
GRID_OVER_CAP = ("retriever.top_k=range(1,101)", "chunker.chunk_size=range(100,200)")  # 10,000 points
GRID_1000 = ("retriever.top_k=range(1,11)", "chunker.chunk_size=range(100,200)")
LINES_WITHIN_S = 120.0  # how long the 1,000-point grid is watched for its lines before it is stopped


def recorded_outputs(path: Path, field: str | None, size: int) -> Path:
    """A recorded-outputs file: the ordinary row, then (`field` "answer" or "contexts") a row whose
    answer, or whose one context, holds `size` bytes; `field` None: the ordinary row alone. Written
    in pieces: the bench process never holds the line whole."""
    with path.open("wb") as out:
        out.write(json.dumps(ORDINARY).encode() + b"\n")
        if field is not None:
            row = {**ORDINARY, "id": "huge", field: [""] if field == "contexts" else ""}
            head, tail = json.dumps(row).encode().split(b'""' if field == "answer" else b'[""]')
            out.write(head + (b'"' if field == "answer" else b'["'))
            for start in range(0, size, 1_000_000):
                out.write(b"x" * min(1_000_000, size - start))
            out.write((b'"' if field == "answer" else b'"]') + tail + b"\n")
    return path


def command(args: list[str], cwd: Path) -> dict:
    """`python -m ragexp ARGS` in a new folder `cwd` (its output beside it, in cwd.log): wall seconds to
    its exit, its exit status, its peak RSS (largest process by wait4, process tree sampled), the
    1-minute load at its start, its output's lines and what it left in its folder."""
    from grids import TreePeak

    cwd.mkdir(parents=True)
    log = cwd.with_suffix(".log")
    load = round(os.getloadavg()[0], 1)
    with log.open("wb") as output:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=cwd, stdout=output, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        tree = TreePeak(proc.pid, with_root=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        tree.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    largest = usage.ru_maxrss // 1024
    lines = log.read_text(errors="replace").splitlines()
    return {"wall_s": round(wall, 2), "exit": proc.returncode, "peak_rss_mb": max(largest, tree.peak_mb),
            "largest_process_mb": largest, "tree_sampled_mb": tree.peak_mb, "load_1min": load,
            "output": lines, "left_behind": sorted(p.name for p in cwd.iterdir())}


def first_lines(args: list[str], cwd: Path) -> dict:
    """`python -m ragexp -m ARGS` (a grid under the cap) in a new folder `cwd`: seconds from its start to
    its size line and to its first progress line, then it is stopped (its process group killed)."""
    from test_grid_cap import lines_until

    cwd.mkdir(parents=True)
    load = round(os.getloadavg()[0], 1)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", *args], cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    proc.started = started  # type: ignore[attr-defined]
    try:
        seen, _ = lines_until(proc, "grid points in", LINES_WITHIN_S)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
    return {**line_times(seen), "load_1min": load}


def line_times(seen: list[tuple[float, str]]) -> dict:
    """Seconds to the grid's size line and to its first progress line (None: not seen), and that line."""
    size = next((round(s, 2) for s, line in seen if "ragexp: a grid of" in line), None)
    progress = next(((round(s, 2), line) for s, line in seen if "grid points in" in line), (None, None))
    return {"size_line_s": size, "progress_line_s": progress[0], "progress_line": progress[1]}


def medians(runs: list[dict], *keys: str, load_at_end: float) -> dict:
    """The median of each figure `keys` over `runs` (None when a run lacks it), the runs themselves, and
    the 1-minute load at the first run's start and at the end."""
    figures = {}
    for key in keys:
        values = [run[key] for run in runs]
        figures[key] = None if None in values else statistics.median(values)
    return {**figures, "runs": runs, "load_1min": [runs[0]["load_1min"], load_at_end]}


def expect(run: dict, code: int, text: str, what: str) -> dict:
    """The run with its output's line that holds `text` in place of its output, or SystemExit when it
    did not end as `what` should (exit `code`, `text` in its output)."""
    said = next((line for line in run["output"] if text in line), None)
    if run["exit"] != code or said is None:
        raise SystemExit(f"bench input_caps: {what} ended with exit {run['exit']}, not {code} with {text!r}:\n"
                         + "\n".join(run["output"][-20:]))
    return {**{k: v for k, v in run.items() if k != "output"}, "line": said[:300]}


def field_figures(work_dir: Path) -> dict:
    files = {field: recorded_outputs(work_dir / f"{field}.jsonl", field, FIELD_BYTES) for field in ("answer", "contexts")}
    files["ordinary"] = recorded_outputs(work_dir / "ordinary.jsonl", None, 0)
    cases = {  # figure -> (file, on_error, exit, a line that says so)
        "answer_50mb_refused": ("answer", "stop", 2, "answer: 50,000,000 bytes, over the cap"),
        "answer_50mb_skipped": ("answer", "skip", 0, "1 malformed rows skipped"),
        "context_50mb_refused": ("contexts", "stop", 2, "contexts: 50,000,000 bytes, over the cap"),
        "context_50mb_skipped": ("contexts", "skip", 0, "1 malformed rows skipped"),
        "ordinary_row_alone": ("ordinary", "stop", 0, "total_questions"),
    }
    runs: dict[str, list[dict]] = {name: [] for name in cases}
    for i in range(RUNS):  # the cases in turn, so that the machine's drift falls on each alike
        for name, (file, on_error, code, text) in cases.items():
            runs[name].append(expect(command([*RECORDED, f"dataset.path={files[file]}", f"dataset.on_error={on_error}"],
                                             work_dir / f"{name}-{i}"), code, text, name))
    load_at_end = round(os.getloadavg()[0], 1)
    figures = {name: medians(case_runs, "wall_s", "peak_rss_mb", load_at_end=load_at_end) for name, case_runs in runs.items()}
    alone = figures["ordinary_row_alone"]
    for name in [n for n in figures if n != "ordinary_row_alone"]:
        figures[name]["added_s"] = round(figures[name]["wall_s"] - alone["wall_s"], 2)
        figures[name]["added_mb"] = figures[name]["peak_rss_mb"] - alone["peak_rss_mb"]
    return figures


def grid_figures(work_dir: Path) -> dict:
    refused = [expect(command(["-m", *GRID_OVER_CAP], work_dir / f"grid-10000-{i}"), 2, "more than max_grid_points",
                      "the 10,000-point grid") for i in range(RUNS)]
    over = medians(refused, "wall_s", "peak_rss_mb", load_at_end=round(os.getloadavg()[0], 1))
    over["left_behind"] = sorted({name for run in refused for name in run["left_behind"]})
    watched = [first_lines(list(GRID_1000), work_dir / f"grid-1000-{i}") for i in range(RUNS)]
    return {"grid_10000_refused": over,
            "grid_1000_first_lines": medians(watched, "size_line_s", "progress_line_s",
                                             load_at_end=round(os.getloadavg()[0], 1))}


def measure(work_dir: Path, args=None) -> dict:
    figures = {"load_1min_start": round(os.getloadavg()[0], 1), **field_figures(work_dir), **grid_figures(work_dir)}
    figures["load_1min_end"] = round(os.getloadavg()[0], 1)
    page(figures)
    return figures


def page(f: dict) -> None:
    def runs(figure: dict, key: str) -> str:
        return ", ".join(str(r[key]) for r in figure["runs"])

    lines = ["# Oversized input: a 50 MB field, a grid over the cap", "",
             f"`python bench/run.py input_caps`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, 1-minute "
             f"load {f['load_1min_start']} at the start and {f['load_1min_end']} at the end (a shared machine: not idle).",
             "Each figure the median of 3 runs, each in a fresh folder; the load at the start and end of those runs.", "",
             f"Recorded outputs: `python -m ragexp {' '.join(RECORDED)} dataset.path=FILE dataset.on_error=...`, FILE one "
             "ordinary row and one whose answer, or whose one context, holds 50 MB. Wall: to the command's exit. Peak RSS: "
             "the larger of its largest process (wait4) and its process tree (sampled every 0.1 s).", "",
             "| case | wall s (runs) | peak RSS MB (runs) | added to the ordinary row alone | load | goal |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name in ("answer_50mb_refused", "answer_50mb_skipped", "context_50mb_refused", "context_50mb_skipped",
                 "ordinary_row_alone"):
        c = f[name]
        added = f"{c['added_s']:+} s, {c['added_mb']:+} MB" if "added_s" in c else ""
        lines.append(f"| {name.replace('_', ' ')} | {c['wall_s']} ({runs(c, 'wall_s')}) | {c['peak_rss_mb']} "
                     f"({runs(c, 'peak_rss_mb')}) | {added} | {c['load_1min'][0]} -> {c['load_1min'][1]} | "
                     f"{'' if name == 'ordinary_row_alone' else '< 10 s, < 300 MB'} |")
    over, watched = f["grid_10000_refused"], f["grid_1000_first_lines"]
    lines += ["", f"Grids: `python -m ragexp -m {' '.join(GRID_OVER_CAP)}` (10,000 points) and "
              f"`python -m ragexp -m {' '.join(GRID_1000)}` (1,000 points, stopped once its progress line came).", "",
              "| figure | median s (runs) | load | goal |", "| --- | --- | --- | --- |",
              f"| 10,000 points: refused, exit 2, after (left in its folder: {over['left_behind'] or 'nothing'}) | "
              f"{over['wall_s']} ({runs(over, 'wall_s')}) | {over['load_1min'][0]} -> {over['load_1min'][1]} | < 5 s, nothing |",
              f"| 1,000 points: its size line after | {watched['size_line_s']} ({runs(watched, 'size_line_s')}) | "
              f"{watched['load_1min'][0]} -> {watched['load_1min'][1]} | < 5 s |",
              f"| 1,000 points: its first progress line after | {watched['progress_line_s']} "
              f"({runs(watched, 'progress_line_s')}) | | < 5 s |", ""]
    (Path(__file__).parent / "results" / "input_caps.md").write_text("\n".join(lines))


if __name__ == "__main__":
    import tempfile

    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-input-caps-"))), indent=2))
