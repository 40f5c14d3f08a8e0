"""`python -m ragexp.plan RUN`: how many questions a comparison against this run needs to detect a
drop, or what drop its questions can detect (the gate's paired one-sided test: ragexp.stats.power)."""
from __future__ import annotations

import argparse
import json
import sys

EPILOG = """examples:
  python -m ragexp.plan outputs/2026-12-02/10-00-00 --metric faithfulness --drop 0.5
  python -m ragexp.plan RUN_ID --questions 200                      # what 200 questions detect, every metric
  python -m ragexp.plan RUN_ID --metric hallucination --drop 0.05 --correlation 0.5

RUN is a run folder or an MLflow run id (--tracking-uri, else $MLFLOW_TRACKING_URI, else
sqlite:///mlflow.db). The spread of the per-question differences between two runs is taken as
sqrt(2 (1 - correlation)) times this run's spread of the metric over its judged questions (0, the
default, assumes nothing: the most cautious), plus the judge's own noise on each side where the
run has judge repeats (repeat_scores)."""


AB_EPILOG = """
An A/B test of the monitor (--ab FOLDER, a monitor's output folder with ab.json): records needed to
decide a difference of --drop (either way; default: the difference seen so far) on each variant and
metric with --power chance, by the monitor's own sequential test, at the traffic of its windows so far."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragexp.plan", description=__doc__.split(": ", 1)[1],
                                epilog=EPILOG + AB_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", metavar="RUN", nargs="?", help="a run folder or an MLflow run id: its per-question scores")
    p.add_argument("--ab", metavar="FOLDER", help="plan the monitor's A/B test of this output folder (its ab.json) instead")
    p.add_argument("--metric", action="append", help="a per-question metric (repeat for several; default: every one)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--drop", type=float, help="the drop to detect, on the metric's own scale")
    size.add_argument("--questions", type=int, help="a number of questions: the drop they detect (default: the run's)")
    p.add_argument("--alpha", type=float, default=0.05, help="one-sided significance level (default 0.05, as the gate's)")
    p.add_argument("--power", type=float, default=0.8, help="the chance of detecting the drop (default 0.8)")
    p.add_argument("--correlation", type=float, default=0.0,
                   help="how far two runs' scores of a question go together, 0-1 (default 0: the most cautious)")
    p.add_argument("--tracking-uri", help="MLflow store of the run")
    return p


def judge_noise(table, metric: str) -> float:
    """The judge's own spread of `metric` per question (the root of the mean variance across its
    repeats), 0 without repeats."""
    import numpy as np

    if "repeat_scores" not in table:
        return 0.0
    variances = []
    for cell in table["repeat_scores"].dropna():
        repeats = json.loads(cell) if isinstance(cell, str) else cell
        values = [r[metric] for r in repeats or () if isinstance(r, dict) and metric in r]
        if len(values) > 1:
            variances.append(np.var(values, ddof=1))
    return float(np.sqrt(np.mean(variances))) if variances else 0.0


def plan(args) -> list[str]:
    import numpy as np

    from ragexp.errors import RagexpError
    from ragexp.stats import power
    from ragexp.store.question_tables import NOT_SCORES
    from ragexp.store.reader import question_table

    if not 0 < args.alpha < 1 or not 0 < args.power < 1 or not 0 <= args.correlation < 1:
        raise RagexpError("--alpha and --power must be between 0 and 1, --correlation in [0, 1)")
    if args.drop is not None and args.drop <= 0 or args.questions is not None and args.questions < 2:
        raise RagexpError("--drop must be above 0 and --questions at least 2")
    if getattr(args, "ab", None):
        return plan_ab(args)
    if not args.run:
        raise RagexpError("give a RUN (a run folder or an MLflow run id), or --ab FOLDER (a monitor's output folder)")
    table = question_table(args.run, args.tracking_uri)
    judged = table[table["status"] == "judged"] if "status" in table else table
    numeric = [c for c in judged.columns if c not in NOT_SCORES and not c.endswith("_reasoning")
               and judged[c].map(lambda v: isinstance(v, (bool, int, float)) and v == v).sum() >= 2]
    metrics = args.metric or numeric
    unknown = [m for m in metrics if m not in numeric]
    if unknown:
        raise RagexpError(f"--metric {unknown[0]}: the run has no per-question {unknown[0]} (it has {', '.join(numeric)})")
    lines = []
    for metric in metrics:
        scores = judged[metric].map(lambda v: float(v) if isinstance(v, (bool, int, float)) else np.nan).dropna()
        sd, noise = float(scores.std(ddof=1)), judge_noise(judged, metric)
        spread = power.difference_spread(sd, args.correlation, noise)
        head = (f"{metric} (sd {sd:.3g} over {len(scores)} questions"
                + (f", judge noise {noise:.3g}" if noise else "") + f"; differences' sd {spread:.3g} at correlation "
                f"{args.correlation:g}): ")
        goal = f"{args.power:.0%} power, one-sided alpha {args.alpha:g}, paired"
        if spread == 0:
            lines.append(head + "every judged question has the same score: this run's spread says nothing about "
                                "the differences a change would make")
        elif args.drop is not None:
            n = power.questions(args.drop, spread, args.alpha, args.power)
            lines.append(head + (f"a drop of {args.drop:g} needs {n} questions ({goal})" if n is not None
                                 else f"a drop of {args.drop:g} needs more than 10,000,000 questions"))
        else:
            n = args.questions or len(scores)
            lines.append(head + f"{n} questions detect a drop of {power.detectable(n, spread, args.alpha, args.power):.3g} ({goal})")
    return lines


def plan_ab(args) -> list[str]:
    """Per variant and metric of a monitor's A/B test: the records (both sides) its sequential test
    needs to decide a difference of `args.drop` (default: the one seen) with `args.power` chance."""
    from pathlib import Path

    from ragexp.errors import RagexpError
    from ragexp.stats.sequential import MOST_WINDOWS, records_to_decide

    path = Path(args.ab) / "ab.json"
    if not path.is_file():
        raise RagexpError(f"--ab {args.ab}: no ab.json in this folder (a monitor run with monitor.ab.control=... makes it)")
    tested = json.loads(path.read_text(encoding="utf-8"))
    if not all("control_sd" in d for d in tested.get("decisions", [])):
        raise RagexpError(f"{path}: written by an older ragexp.monitor, without the spreads the planner needs; "
                          "run the monitor again")
    if args.questions is not None:
        raise RagexpError("--questions plans a gate against a run; with --ab give --drop (or nothing: the difference seen)")
    have = list(dict.fromkeys(d["metric"] for d in tested["decisions"]))
    unknown = [m for m in args.metric or () if m not in have]
    if unknown:
        raise RagexpError(f"--metric {unknown[0]}: the A/B test has no such metric (it has {', '.join(have)})")
    decisions = [d for d in tested["decisions"] if not args.metric or d["metric"] in args.metric]
    lines = []
    for d in decisions:
        head = f"{d['metric']}, {d['variant']} vs {tested['control']}: "
        difference = args.drop if args.drop is not None else abs(d["effect"] or 0)
        said = f"a difference of {difference:.4g}" + ("" if args.drop is not None else " (the one seen so far)")
        records = (d["control_records"], d["variant_records"])
        if not d["control_sd"] or not d["variant_sd"] or not d["looks"] or not difference:
            lines.append(head + "no spread or no difference yet: nothing to plan from")
            continue
        total = records_to_decide(difference, (d["control_sd"], d["variant_sd"]), records, d["looks"],
                                  tested["alpha_each"], d["planned_records"], args.power)
        per_window = sum(records) / d["looks"]
        if total is None:
            lines.append(head + f"{said} is not decided with {args.power:.0%} chance within {MOST_WINDOWS} windows "
                                "of this traffic")
            continue
        lines.append(head + f"{said} is decided with {args.power:.0%} chance by about {int(total)} records of both "
                            f"variants ({total / per_window:.0f} windows at {per_window:.0f} a window; it has "
                            f"{sum(records)}; sequential, each comparison at "
                            f"{tested['alpha_each']:.3g})")
    return lines


def main(argv: list[str] | None = None) -> int:
    from ragexp.config.cli_settings import parse_args
    from ragexp.errors import RagexpError

    args = parse_args(parser(), argv)
    try:
        lines = plan(args)
    except RagexpError as err:
        print(f"ragexp.plan: error: {err}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
