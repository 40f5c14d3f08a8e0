"""`python -m ragexp.compare`: the leaderboard of a sweep, with CIs, paired tests, plots and a report."""
from __future__ import annotations

import argparse
import sys
import time

from ragexp.config.cli_settings import parse_args

EPILOG = """targets:
  (none)              the latest sweep in the store
  EXPERIMENT          the latest sweep of that MLflow experiment (--all: every run in it)
  PARENT_RUN_ID       that sweep (a multirun's parent run)
  RUN_ID RUN_ID ...   those runs

examples:
  python -m ragexp.compare
  python -m ragexp.compare chunking_grid --all
  python -m ragexp.compare --tracking-uri http://mlflow-host:5000 3f2a...e1
  python -m ragexp.compare --rerun 8e06e8e3ce814ac1b7a5c493ce30bbd1
  python -m ragexp.compare --labels labels.csv      # + human-corrected means (columns run, question_id, <metric>)
  python -m ragexp.compare --labels-from mlflow     # the same from the labels people gave in MLflow's Review tab
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragexp.compare", description=__doc__.split(": ", 1)[1],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", metavar="TARGET", help="experiment name, sweep parent run id, or run ids")
    p.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
    p.add_argument("--all", action="store_true", dest="all_runs",
                   help="with an EXPERIMENT: every run in it (the latest of each configuration), not its latest sweep")
    p.add_argument("--objective", help="aggregate to rank by (default: the runs' `objective`, overall_score)")
    p.add_argument("--minimize", action="store_true", help="lower objective is better")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level of the tests (default 0.05)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples and permutations (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the resampling (default 0)")
    p.add_argument("--out", help="report folder (default: the sweep's folder/report, else ./ragexp-compare/ID)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument("--overwrite", action="store_true", help="write over a report already in the folder (default: "
                   "a new folder beside it, report-2, ..., so that the sweep's own report is kept)")
    p.add_argument("--no-log", action="store_true", help="do not log the report to the sweep's parent run")
    p.add_argument("--labels", metavar="FILE", help="human labels for part of the runs' questions (CSV or JSONL with "
                   "a `run` column): adds human-corrected (PPI) means beside the judge's")
    p.add_argument("--labels-from", choices=["mlflow"],
                   help="the labels people gave in MLflow's Review tab on the runs' questions (python -m "
                        "ragexp.calibrate RUN_ID --export N --to mlflow queues them): human-corrected means as --labels")
    p.add_argument("--rerun", metavar="RUN_ID", help="print the command that re-runs this logged run, and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parse_args(parser(), argv)  # also tracker.tracking_uri=URI, as the Hydra commands spell it
    from ragexp.errors import RagexpError

    try:
        if args.rerun:
            from ragexp.compare.rerun import rerun_command

            comment, command = rerun_command(args.rerun, args.tracking_uri)
            print(comment, file=sys.stderr)
            print(command)
            return 0
        if args.labels and args.labels_from:
            raise RagexpError("give --labels FILE or --labels-from mlflow, not both")
        if not 0 < args.alpha < 1 or not 0 < args.level < 1 or args.resamples < 1:
            raise RagexpError("--alpha and --level must be between 0 and 1, --resamples at least 1")
        from ragexp.compare import make
        from ragexp.compare.report import artifact_dir, corrected_table, leaderboard_table

        started = time.perf_counter()
        board, files, logged = make(args.targets, args.tracking_uri, all_runs=args.all_runs, objective=args.objective,
                                    maximize=not args.minimize, level=args.level, alpha=args.alpha,
                                    resamples=args.resamples, seed=args.seed, out_dir=args.out,
                                    plots=not args.no_plots, log=not args.no_log, labels=args.labels or args.labels_from,
                                    overwrite=args.overwrite)
    except RagexpError as err:
        print(f"ragexp.compare: error: {err}", file=sys.stderr)
        return 2
    print(f"{board.selection.title}: objective {board.objective}, {board.level:.0%} CIs, Holm-corrected "
          f"paired tests at alpha {board.alpha}\n")
    print(leaderboard_table(board).markdown() + "\n")
    corrected = corrected_table(board)
    if corrected is not None:
        print(f"human-corrected means ({board.level:.0%} CI; judge only beside):\n{corrected.markdown()}\n")
    if board.selection.incomplete:
        print(f"INCOMPLETE sweep: {board.selection.incomplete}")
        for job in board.selection.failed_jobs:
            print(f"  failed: {job}")
    for note in board.notes:
        print(f"note: {note}")
    print(f"report: {files['html']} (and {files['markdown'].name}, {files['json'].name}"
          + (f", {len(files) - 3} plots)" if len(files) > 3 else ")"))
    if logged:
        print(f"logged to run {logged} as artifacts {artifact_dir(files['html'].parent)}/")
    print(f"took {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
