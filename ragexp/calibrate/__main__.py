"""`python -m ragexp.calibrate`: how well a run's judge agrees with human labels."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ragexp.config.cli_settings import parse_args

EPILOG = """examples:
  python -m ragexp.calibrate RUN_ID --export 40 --out sheet.csv     # a stratified sheet to label
  python -m ragexp.calibrate RUN_ID --labels sheet.csv              # the same sheet, filled in
  python -m ragexp.calibrate RUN_ID --export 40 --to mlflow         # a review queue in MLflow's Review tab
  python -m ragexp.calibrate RUN_ID --labels-from mlflow            # the answers people gave there
  python -m ragexp.calibrate RUN_ID --export drawn --to mlflow      # a judge=cascade run's drawn questions, for people
  python -m ragexp.calibrate outputs/2026-11-30/10-00-00 --labels labels.jsonl
  python -m ragexp.calibrate multirun/2026-12-02/10-00-00/0 multirun/2026-12-02/10-00-00/1 --labels labels.csv
  python -m ragexp.calibrate --outputs labelled.jsonl               # judge recorded outputs with the default judge
  python -m ragexp.calibrate --outputs labelled.csv judge=llm judge.endpoint.model=gpt-4o-mini
  python -m ragexp.calibrate --outputs labelled.csv judge=llm --align --variants variants.yaml  # an aligned judge

RUN is an MLflow run id (--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db) or a
run folder with questions.json or questions.jsonl. Labels: CSV or JSONL, long (question_id, metric,
label[, annotator]) or wide (question_id[, annotator] and one column per judge metric), on the
judge's scale; `hallucination` as 1/0 (yes/no). --export N --to mlflow puts the sample up for
review in the run's MLflow experiment instead (a review queue, a label schema per judge metric on its
scale); --labels-from mlflow reads the answers people gave there (human feedback on the run's
question traces; the judge's own feedback is left out). With labels for part of a run's questions, the
report gives each labelled metric's mean over the whole run twice: the judge's alone, and
human-corrected (prediction-powered inference: the judge's mean corrected by its error on the
labelled questions, with a valid confidence interval). Several RUNs with --labels (variants of a
rubric's criterion, two judges): each one's agreement, then which agrees best with people, with a
paired interval on the difference ("cannot tell" when it holds 0). A run whose judge judged each
question several times (judge.repeats) also gets the judge's agreement with itself: per metric the
share of questions whose repeats disagree, and which.
--outputs FILE: recorded outputs (question, contexts, answer[, reference, id], or ragas' user_input,
retrieved_contexts, response) with labels as further columns (a judge metric, hallucination, any
yes/no column); the judge the OVERRIDEs choose (as for python -m ragexp) judges every row; a yes/no
label gets the threshold that maximises balanced accuracy on a tuning part, checked on a held-out part
(printed as an override only when it beats the current setting there; --holdout 0: in-sample figures).
--export drawn: the questions a judge=cascade run with people's labels (judge@judge.expensive=people)
drew and nobody has labelled yet; the rerun reads their labels (judge.expensive.labels=FILE, or
=mlflow with judge.expensive.run=RUN_ID). A cascade run's agreement is its cheap judge's.
--align (with --outputs): the judge's instruction variant (its own, --variants FILE's) and examples people scored
(--shots) chosen on a tuning part, checked against the configured judge on the held-out part (--holdout, --group),
written as judge/aligned.yaml under --out; --dry-run prints the plan, --max-requests caps it.
FILE is read as dataset=outputs reads it (also .tsv and .parquet), its settings as overrides:
dataset.columns.question=prompt, dataset.preset=mlflow, dataset.on_error=skip."""


DRAWN = "drawn"


def export_size(text: str) -> int | str:
    """--export's value: a number of questions, or `drawn`."""
    if text == DRAWN:
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number of questions nor {DRAWN}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragexp.calibrate", description=__doc__.split(": ", 1)[1],
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("targets", nargs="*", metavar="RUN | OVERRIDE",
                   help="MLflow run id or run folder; with --outputs: Hydra overrides choosing the judge")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--outputs", metavar="FILE", help="labelled recorded outputs to judge and calibrate on")
    what.add_argument("--labels", metavar="FILE", help="human labels to compare the judge with")
    what.add_argument("--labels-from", choices=["mlflow"],
                      help="read the labels people gave in MLflow's Review tab (see --to mlflow)")
    what.add_argument("--export", metavar="N", type=export_size,
                      help="write an annotation sheet of N stratified questions, or of the questions a judge=cascade "
                           "run drew for people's labels (drawn)")
    p.add_argument("--to", choices=["sheet", "mlflow"], default="sheet",
                   help="--export: a CSV sheet (default) or a review queue in the run's MLflow experiment")
    p.add_argument("--tracking-uri", help="MLflow store of the run")
    p.add_argument("--out", help="report folder (with --labels) or sheet file (with --export)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--level", type=float, default=0.95, help="confidence level of the intervals (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the sample and the resampling")
    p.add_argument("--dir", metavar="DIR", help="--outputs: the stage cache's folder (as cache.dir=DIR)")
    p.add_argument("--group", metavar="COLUMN",
                   help="--outputs: a column whose rows are held out together (e.g. the source document), so "
                        "that no group is on both sides of the split")
    p.add_argument("--holdout", type=float, default=0.3,
                   help="--outputs: share of each class held out from threshold tuning (default 0.3; with "
                        "--group: of the rows, in whole groups)")
    p.add_argument("--no-log", action="store_true", help="do not log a calibration run to MLflow")
    p.add_argument("--align", action="store_true",
                   help="--outputs: choose the instruction variant and the examples people scored that make the judge "
                        "agree best with them on the tuning part, check it on the held-out part, write it as a config")
    p.add_argument("--variants", metavar="FILE",
                   help="--align: a YAML file mapping names to system prompts to try beside the configured one")
    p.add_argument("--shots", default="0,3", metavar="N,N",
                   help="--align: numbers of examples people scored to show the judge (default 0,3)")
    p.add_argument("--max-requests", type=int, default=2000,
                   help="--align: refuse a plan of more judge requests than this (default 2000)")
    p.add_argument("--dry-run", action="store_true", help="--align: print the plan and its requests, send none")
    return p


def shown(interval) -> str:
    """An estimate with its interval, or a dash when there is none."""
    if interval is None or interval.estimate != interval.estimate:
        return "—"
    return f"{interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def markdown(run, results, level: float = 0.95, itself=()) -> str:
    from ragexp.calibrate.agreement import leniency

    lines = [f"# Calibration of judge {run.judge!r} on run {run.name}", "",
             "| metric | scale (level) | questions | annotators | Spearman | Kendall | kappa | alpha | MAE | bias "
             "| annotators' alpha | annotators' kappa |", "|" + " --- |" * 12]
    for r in results:
        cells = [shown(r.judge_vs_people.get(s)) for s in ("spearman", "kendall", "kappa", "alpha", "mae", "bias")]
        ceiling = [shown(r.alpha), shown(r.pairwise_kappa)]
        scale = "yes/no" if r.yes_no else f"{r.scale[0]:g}-{r.scale[1]:g}"
        lines.append(f"| {r.metric} | {scale} ({r.level}) | {r.questions} | {r.annotators} | "
                     + " | ".join(cells + ceiling) + " |")
    lines += ["", f"Judge vs people on the questions both scored (people: the mean over annotators); "
              f"[{level:.0%} bootstrap CI over questions]. kappa: Cohen's, with quadratic weights on a scale's points, "
              "unweighted on a yes/no metric. alpha: Krippendorff's, the judge and the people as two coders, at the "
              "metric's level of measurement (nominal for yes/no, ordinal for a scale of whole points, interval for a "
              "continuous 0-1 score). bias > 0: the judge scores higher than people, i.e. it is more lenient, "
              "except where higher is worse (hallucination: it flags more, i.e. it is stricter). The annotators' "
              "agreement (Krippendorff's alpha at the same level, mean pairwise kappa) is the ceiling for the judge."]
    biased = [(r.metric, b) for r in results if (b := r.judge_vs_people.get("bias")) is not None
              and not b.low <= 0 <= b.high]
    lines += [""] + [f"- {metric}: the judge is {leniency(metric, b.estimate)} (bias {b.estimate:+.3f}, "
                     f"its CI excludes 0)" for metric, b in biased] if biased else []
    lines += yes_no_lines(results)
    lines += corrected_means(results, level)
    lines += self_agreement_lines(run, itself, level)
    return "\n".join(lines) + "\n"


def yes_no_lines(results) -> list[str]:
    """A yes/no metric's kappa beside what it depends on: how often judge and people agree, and how
    often each says yes (at a prevalence near 0 or 1 kappa stays low however often they agree)."""
    lines = []
    for r in results:
        found = r.judge_vs_people
        if not r.yes_no or "agreement" not in found:
            continue
        share = found["prevalence"].estimate
        line = (f"- {r.metric} (yes/no): kappa {shown(found['kappa'])} (unweighted); they agree on "
                f"{shown(found['agreement'])} of the questions; people say yes to {shown(found['prevalence'])}, "
                f"the judge to {shown(found['judge_prevalence'])}")
        if not 0.2 <= share <= 0.8:
            line += ("; at this prevalence kappa stays low even when judge and people mostly agree: read it "
                     "with the agreement")
        lines.append(line)
    return [""] + lines if lines else []


def self_agreement_lines(run, itself, level: float = 0.95) -> list[str]:
    """The judge's agreement with itself over its repeats of each question (judge.repeats)."""
    if not itself:
        return []
    temperature = run.judge_config.get("temperature")
    at = f" at temperature {temperature:g}" if isinstance(temperature, (int, float)) else ""
    repeats = max(s.repeats for s in itself)
    lines = ["", f"## The judge against itself ({repeats} repeats{at})", "",
             "| metric | level | questions | flip rate | alpha across repeats | questions that flip |", "|" + " --- |" * 6]
    for s in itself:
        flipped = ", ".join(s.flipped[:10]) + (f" (+{len(s.flipped) - 10} more)" if len(s.flipped) > 10 else "")
        lines.append(f"| {s.metric} | {s.level} | {s.questions} | {shown(s.flip_rate)} | {shown(s.alpha)} | "
                     f"{flipped or '—'} |")
    lines += ["", f"A flip: a question whose repeats land on different points of the metric's scale (a different "
              f"verdict on yes/no; quarter points on 0-1) [{level:.0%} Wilson CI]. alpha: Krippendorff's with the "
              "repeats as coders. A question that flips sits near the judge's boundary: its score is partly chance."]
    return lines


def corrected_means(results, level: float = 0.95) -> list[str]:
    """The table of each labelled metric's mean over the run: the judge's alone and human-corrected."""
    shown = [r for r in results if r.judge_mean is not None]
    if not shown:
        return []
    lines = ["", f"## Human-corrected means ({level:.0%} CI)", "",
             "| metric | judged questions | labelled | judge only | human-corrected (PPI) |", "|" + " --- |" * 5]
    for r in shown:
        corrected = r.corrected_mean.shown() if r.corrected_mean else "— (fewer than 2 labels)"
        lines.append(f"| {r.metric} | {r.judge_mean.questions} | {r.corrected_mean.labelled if r.corrected_mean else 0} "
                     f"| {r.judge_mean.shown()} | {corrected} |")
    lines += ["", "judge only: the judge's mean over every judged question of the run (Student t CI). "
              "human-corrected: that mean minus the judge's mean error on the labelled questions "
              "(prediction-powered inference, Angelopoulos et al. 2023): unbiased whatever the judge's bias, "
              "valid when the labelled questions are a random part of the run, as the exported sheet's sample is "
              "(stratified in proportion to each stratum's size)."]
    return lines


def confusion(r) -> tuple[list[str], list[list[int]]]:
    """One metric's judge-vs-people counts (`counts[people][judge]`) on the judge's scale points, and
    the points' names; a yes/no label (hallucination) as its 2x2 table of no / yes."""
    import numpy as np

    from ragexp.calibrate.agreement import is_yes_no, scale_points, snap

    yes_no = is_yes_no(*r.pairs)
    points = np.array([0.0, 1.0]) if yes_no else scale_points(r.scale)
    counts = [[0] * len(points) for _ in points]
    for j, h in zip(snap(r.pairs[0], points), snap(r.pairs[1], points)):
        counts[h][j] += 1
    return (["no", "yes"] if yes_no else [f"{p:g}" for p in points]), counts


def confusion_plot(results, path: Path) -> Path | None:
    """Judge against people per labelled metric (`confusion`), one panel each."""
    from matplotlib.figure import Figure

    shown = [r for r in results if r.questions]
    if not shown:
        return None
    fig = Figure(figsize=(4.2 * len(shown), 4.0), dpi=110, layout="constrained")
    for n, r in enumerate(shown, start=1):
        ax = fig.add_subplot(1, len(shown), n)
        names, counts = confusion(r)
        ax.imshow(counts, origin="lower", cmap="Blues")
        ticks = list(range(len(names)))
        ax.set_xticks(ticks, names, fontsize=7)
        ax.set_yticks(ticks, names, fontsize=7)
        for y, row in enumerate(counts):
            for x, count in enumerate(row):
                if count:
                    ax.text(x, y, str(count), ha="center", va="center", fontsize=7)
        ax.set_xlabel("judge")
        ax.set_ylabel("people")
        ax.set_title(r.metric, fontsize=9)
    fig.savefig(path)
    return path


def log_run(run, results, files: list[Path], itself=()) -> str | None:
    """A calibration run in the judged run's experiment, tagged with the judged run's id."""
    if run.run_id is None:
        return None
    from mlflow.entities import Metric

    from ragexp.store.reader import client_for
    from ragexp.base.names import metric_key

    client, _ = client_for(run.tracking_uri)
    created = client.create_run(run.experiment_id, run_name=f"calibration of {run.name}", tags={
        "ragexp.role": "calibration", "ragexp.calibrates": run.run_id, "judge": run.judge})
    run_id = created.info.run_id
    metrics = []
    for r in results:
        values = {name: interval.estimate for name, interval in r.judge_vs_people.items()}
        values.update({"krippendorff_alpha": r.alpha.estimate if r.alpha else None,
                       "pairwise_kappa": r.pairwise_kappa.estimate if r.pairwise_kappa else None,
                       "questions": r.questions})
        for name, mean in (("judge_mean", r.judge_mean), ("corrected_mean", r.corrected_mean)):
            if mean is not None:
                values.update({name: mean.estimate, f"{name}_low": mean.low, f"{name}_high": mean.high})
        metrics += [Metric(f"{name}_{metric_key(r.metric)}", float(v), 0, 0) for name, v in values.items()
                    if v is not None and v == v]
    for a in itself:  # the judge against itself: flip_rate_<metric>, self_alpha_<metric>
        metrics += [Metric(f"{name}_{metric_key(a.metric)}", float(v), 0, 0)
                    for name, v in (("flip_rate", a.flip_rate.estimate), ("self_alpha", a.alpha.estimate if a.alpha else None))
                    if v is not None and v == v]
    client.log_batch(run_id, metrics=metrics)
    for file in files:
        client.log_artifact(run_id, str(file))
    client.set_terminated(run_id, "FINISHED")
    return run_id


def main(argv: list[str] | None = None) -> int:
    args = parse_args(parser(), argv)  # also tracker.tracking_uri=URI, as the Hydra commands spell it
    from ragexp.errors import RagexpError

    if args.outputs is not None:
        return on_outputs(args)
    try:
        from ragexp.calibrate import labels as labels_io
        from ragexp.calibrate import source

        if args.to != "sheet" and args.export is None:
            raise RagexpError("--to goes with --export N")
        if len(args.targets) > 1 and (args.labels or args.labels_from) is not None:
            return on_variants(args)
        if len(args.targets) != 1:
            raise RagexpError("give one RUN (an MLflow run id or a run folder), several with --labels, or --outputs FILE")
        run = source.load(args.targets[0], args.tracking_uri)
        if not run.metrics:
            raise RagexpError(f"run {run.name}: the table has no score column of judge {run.judge!r}")
        if args.export is not None:
            chosen = drawn(run) if args.export == DRAWN else None
            size = len(chosen) if chosen is not None else int(args.export)
            if size < 1:
                raise RagexpError("--export N needs N >= 1")
            if args.to == "mlflow":
                return to_review_queue(run, size, args.seed, chosen)
            sheet = labels_io.export(run, size, args.out or f"calibration-sheet-{run.name}.csv", args.seed, chosen)
            print(f"wrote {sheet}: {min(size, len(run.judged()))} questions to label "
                  f"({', '.join(run.metrics)}, on the judge's scale); fill in, then --labels {sheet}")
            return 0
        if not 0 < args.level < 1 or args.resamples < 1:
            raise RagexpError("--level must be between 0 and 1, --resamples at least 1")
        from ragexp.calibrate.agreement import measure, self_agreement

        results = measure(run, labels_of(args, run), args.resamples, args.seed, args.level)
    except RagexpError as err:
        print(f"ragexp.calibrate: error: {err}", file=sys.stderr)
        return 2
    itself = self_agreement(run, args.resamples, args.seed, args.level)
    folder = Path(args.out or Path("ragexp-calibrate") / (run.run_id[:8] if run.run_id else run.name))
    folder.mkdir(parents=True, exist_ok=True)
    report = markdown(run, results, args.level, itself)
    files = [folder / "calibration.md", folder / "calibration.json"]
    files[0].write_text(report)
    files[1].write_text(json.dumps({"run": run.run_id or run.name, "judge": run.judge,
                                    "metrics": [r.row() for r in results],
                                    "self_agreement": {"temperature": run.judge_config.get("temperature"),
                                                       "metrics": [a.row() for a in itself]}}, indent=2) + "\n")
    plot = confusion_plot(results, folder / "confusion.png")
    files += [plot] if plot else []
    print(report)
    logged = None if args.no_log else log_run(run, results, files, itself)
    print(f"report: {folder}" + (f"; logged as run {logged} (tag ragexp.calibrates={run.run_id})" if logged else ""))
    return 0


def labels_of(args, run):
    """People's labels of `run`: from the --labels file, or with --labels-from mlflow from MLflow's Review tab."""
    from ragexp.calibrate import labels, review

    return labels.read(args.labels, run) if args.labels is not None else review.read(run)


def drawn(run) -> list[str]:
    """--export drawn: the questions a judge=cascade run drew for people's labels that have none yet."""
    from ragexp.errors import RagexpError
    from ragexp.judges.people import WANTED

    if "judged_by" not in run.table:
        raise RagexpError(f"--export drawn: run {run.name} is not a judge=cascade run (it drew no question)")
    chosen = [str(q) for q, by in zip(run.table["question_id"], run.table["judged_by"]) if by == WANTED]
    if not chosen:
        raise RagexpError(f"--export drawn: run {run.name} has no drawn question waiting for a label (its expensive "
                          "judge is not judge@judge.expensive=people, or every drawn question has one)")
    return chosen


def to_review_queue(run, size: int, seed: int, chosen: list[str] | None = None) -> int:
    """--export N --to mlflow: the sample (or the questions `chosen`) as a review queue in the run's
    experiment (ragexp.calibrate.review)."""
    from ragexp.calibrate import review

    queue = review.export(run, size, seed, chosen)
    then = (f"python -m ragexp ... judge.expensive.labels=mlflow judge.expensive.run={run.run_id} (the same command "
            "as the run's)" if chosen is not None else f"python -m ragexp.calibrate {run.run_id} --labels-from mlflow")
    print(f"review queue {queue.name!r}: {len(queue.questions)} questions of run {run.name} to label "
          f"({', '.join(queue.schemas.values())}, on the judge's scale)\n"
          f"answer them in the Review tab: {queue.link}\n"
          f"then: {then}")
    return 0


def on_variants(args) -> int:
    """Several RUNs with --labels: each run's agreement, then which agrees best with people
    (ragexp.calibrate.variants)."""
    from ragexp.calibrate import source, variants
    from ragexp.calibrate.agreement import measure
    from ragexp.errors import RagexpError

    try:
        if not 0 < args.level < 1 or args.resamples < 1:
            raise RagexpError("--level must be between 0 and 1, --resamples at least 1")
        runs = {target: source.load(target, args.tracking_uri) for target in args.targets}
        labels = {target: labels_of(args, run) for target, run in runs.items()}
    except RagexpError as err:
        print(f"ragexp.calibrate: error: {err}", file=sys.stderr)
        return 2
    report, rows = [], {}
    for target, run in runs.items():
        results = measure(run, labels[target], args.resamples, args.seed, args.level)
        report.append(markdown(run, results, args.level).replace(f"on run {run.name}", f"on run {target}", 1))
        rows[target] = [r.row() for r in results]
    found = variants.compare(runs, labels, args.resamples, args.seed, args.level)
    text = "\n".join([*report, *variants.markdown(found, args.level)]) + "\n"
    folder = Path(args.out or Path("ragexp-calibrate") / "variants")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "calibration.md").write_text(text)
    (folder / "calibration.json").write_text(json.dumps({"runs": rows, "variants": [v.to_json() for v in found]},
                                                        indent=2) + "\n")
    print(text)
    print(f"report: {folder}")
    return 0


def on_outputs(args) -> int:
    """--outputs FILE: judge the labelled rows with the configured judge, then the agreement of each
    labelled metric and the threshold analysis of each yes/no label."""
    from ragexp.errors import RagexpError

    try:
        if not 0 < args.level < 1 or args.resamples < 1 or not 0 <= args.holdout < 1:
            raise RagexpError("--level must be between 0 and 1, --resamples at least 1, --holdout in [0, 1)")
        from ragexp.calibrate import outputs, verdicts
        from ragexp.calibrate.agreement import measure

        cfg = outputs.compose([*args.targets, *([f"cache.dir={args.dir}"] if args.dir else [])])
        rows, skipped = outputs.labelled_rows(args.outputs, cfg)
        groups = outputs.groups_of(rows, args.group) if args.group else None  # checked before any judging
        if args.align:
            return on_align(args, cfg, rows, groups)
        judge, judged = outputs.judge_rows(rows, cfg)
        run = outputs.as_run(Path(args.outputs).stem, judge, rows, judged)
        labels, binary, notes = outputs.labels_of(rows, run, args.group)
        notes += [f"{len(skipped)} malformed rows skipped (first: {skipped[0]})"] if skipped else []
        if groups is not None:
            notes.append(f"tuning and held-out parts split by {args.group} ({len(set(groups.values()))} groups): "
                         f"no {args.group} is on both sides")
    except RagexpError as err:
        print(f"ragexp.calibrate: error: {err}", file=sys.stderr)
        return 2
    results = measure(run, labels, args.resamples, args.seed, args.level) if labels else []
    checked = [verdicts.calibrate(label, values, run, judge, args.holdout, args.seed, groups) for label, values in binary.items()]
    failed = [j for j in judged if isinstance(j, str)]
    notes += [f"{len(failed)} of {len(rows)} rows could not be judged (first: {failed[0]})"] if failed else []
    report = (markdown(run, results, args.level) if results else f"# Calibration of judge {run.judge!r} on {args.outputs}\n")
    report += "\n".join(verdicts.markdown(checked, run.judge) + [f"- note: {n}" for n in notes]) + "\n"
    folder = Path(args.out or Path("ragexp-calibrate") / run.name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "calibration.md").write_text(report)
    (folder / "calibration.json").write_text(json.dumps({
        "outputs": str(args.outputs), "judge": run.judge, "rows": len(rows), "failed": len(failed),
        "metrics": [r.row() for r in results], "yes_no": [c.to_json() for c in checked], "notes": notes},
        indent=2, default=str) + "\n")
    confusion_plot(results, folder / "confusion.png")
    outputs.write_judged(run, judge, folder)  # the judged rows: a run folder `python -m ragexp.calibrate` reads
    print(report)
    for c in checked:
        if c.recommended:
            print(c.recommended)  # the ready override, one a line, last: `... | tail -1` gives it
    print(f"report: {folder}", file=sys.stderr)
    return 0


def on_align(args, cfg, rows, groups) -> int:
    """--outputs FILE --align: the aligned judge (ragexp.calibrate.align), its report and config file."""
    from ragexp.calibrate import align, outputs
    from ragexp.config.build import build
    from ragexp.errors import RagexpError

    try:
        shots = align.shots_of(args.shots)
        args.shots = shots
        if args.max_requests < 1:
            raise RagexpError("--max-requests must be at least 1")
        judge = build(cfg.judge)  # its metrics and scales; nothing judged yet
        run = outputs.as_run(Path(args.outputs).stem, judge, [], [])
        labels, binary, notes = outputs.labels_of(rows, run, args.group)
        folder = Path(args.out or Path("ragexp-calibrate") / f"{run.name}-aligned")
        lines, found = align.align(cfg, rows, align.labels_by_question(labels, binary), run.scales, args, groups, folder)
    except RagexpError as err:
        print(f"ragexp.calibrate: error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("\n".join(lines))
        return 0
    report = "\n".join([f"# A judge aligned to people's labels on {args.outputs}", *lines,
                        *[f"- note: {n}" for n in notes]]) + "\n"
    (folder / "calibration.md").write_text(report)
    (folder / "align.json").write_text(align.as_json(found))
    print(report)
    print(f"report: {folder}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
