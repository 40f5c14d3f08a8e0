"""`python -m ragexp.compare`: which configurations of a sweep are really better.

`make(...)` reads the runs from MLflow (source), builds the leaderboard with bootstrap CIs and
paired tests (metrics, stats, leaderboard), writes the report with its plots (report, plots)
and logs it to the sweep's parent run. Nothing heavy is imported until it is called."""
from __future__ import annotations

import hashlib
from pathlib import Path
from ragexp.store import reader


def default_folder(selection) -> Path:
    """The sweep's own folder (report/ beside its jobs) when it is on this machine, else
    ./ragexp-compare/<parent run id or a hash of the run ids>/."""
    parent = selection.parent
    sweep_dir = Path(parent.tags.get("sweep_dir", "")) if parent is not None else None
    if sweep_dir is not None and str(sweep_dir) not in ("", ".") and sweep_dir.is_dir():
        return sweep_dir / "report"
    name = parent.run_id[:8] if parent is not None else "runs-" + hashlib.sha256(
        " ".join(sorted(r.run_id for r in selection.runs)).encode()).hexdigest()[:8]
    return Path("ragexp-compare") / name


def free_folder(folder: Path) -> Path:
    """`folder`, or when it already holds a report, the first of folder-2, folder-3, ... that does not."""
    candidate, n = folder, 1
    while (candidate / "report.md").exists():
        n += 1
        candidate = folder.with_name(f"{folder.name}-{n}")
    return candidate


RACE_QUESTIONS = "ragexp.racing.questions"  # a racing sweep's job: the questions of its round


def on_every_question(selection: reader.Selection) -> reader.Selection:
    """A racing sweep's runs of its last round (the survivors, on every question), as its own final
    leaderboard compares them: its earlier rounds' runs, on fewer questions, are left out and said
    in a note (the race's report has every round). Any other selection as it is."""
    runs = selection.runs
    sizes = {int(run.tags[RACE_QUESTIONS]) for run in runs if str(run.tags.get(RACE_QUESTIONS, "")).isdigit()}
    if selection.parent is None or not sizes:
        return selection
    selection.runs = [run for run in runs if run.tags.get(RACE_QUESTIONS) == str(max(sizes))]
    selection.notes.append(f"a racing sweep: its {len(selection.runs)} runs on {max(sizes)} questions (its last round) "
                           f"are compared; {len(runs) - len(selection.runs)} runs of its earlier rounds, on fewer "
                           "questions, are left out (its report/race.md has every round)")
    return selection


def make(targets: list[str] | None = None, tracking_uri: str | None = None, *, all_runs: bool = False,
         objective: str | None = None, maximize: bool = True, level: float = 0.95, alpha: float = 0.05,
         resamples: int = 10_000, seed: int = 0, out_dir: Path | None = None, plots: bool = True,
         log: bool = True, labels: str | Path | None = None, overwrite: bool = False):
    """Leaderboard + report for `targets` (see ragexp.store.reader.select); returns (leaderboard, files, logged run id).
    `labels`: human labels for part of the runs' questions, a file or "mlflow" for the answers people
    gave in MLflow's Review tab (see ragexp.compare.corrected): the report adds each labelled
    metric's human-corrected mean beside the judge's. A folder that already holds a report (the
    sweep's own, made at its end) is kept unless `overwrite`: the new report goes to the next free
    folder beside it (report-2, report-3, ...), and is logged under that name."""
    from ragexp.compare import leaderboard, report

    selection = on_every_question(reader.select(list(targets or []), tracking_uri, all_runs=all_runs))
    board = leaderboard.build(selection, objective, maximize, level, alpha, resamples, seed)
    if labels is not None:
        from ragexp.compare import corrected

        board.corrected = corrected.measure([e.run for e in board.entries], corrected.people(labels, selection.runs), level)
    folder = Path(out_dir) if out_dir else default_folder(selection)
    if not overwrite:
        folder = free_folder(folder)
    files = report.write(board, folder, with_plots=plots)
    logged = report.log_to_parent(board, folder) if log else None
    return board, files, logged
