"""The comparison report: Markdown, self-contained HTML (plots inlined) and JSON, written to a
folder (the sweep's `report/`) and logged as artifacts of the sweep's parent run."""
from __future__ import annotations

import base64
import html
import json
import logging
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ragexp.compare.leaderboard import REQUESTS, Entry, Leaderboard, slice_metrics
from ragexp.stats.inference import Interval
from ragexp.stats.power import detectable_from_interval
from ragexp.compare.plots import draw_all
from ragexp.base.verdicts import VERDICTS
from ragexp.run.embedding_map import draw
from ragexp.store.run_folder import MAP_IMAGE, MAP_POINTS
from ragexp.store.sqlite_store import database_of

ARTIFACT_DIR = "report"
log = logging.getLogger("ragexp")
CAPTIONS = {
    "metrics": "Each aggregate per configuration: the run's logged value, whiskers = {level} bootstrap CI over "
               "questions (no whiskers where the per-question table does not reproduce the aggregate). "
               "Orange: best; green: not significantly different from the best; purple: significantly worse. "
               "An aggregate that is the same in every configuration is named under the plot, not drawn.",
    "settings": "{objective} of every configuration, per swept setting: one row per value, one dot per "
                "configuration with that value (colours as above), the diamond their mean. A value whose dots all "
                "lie on the better side of the others' is better whatever the other settings are.",
    "distribution": "Per-question {objective} per configuration (box: quartiles; dots: questions; diamond: mean). "
                    "A question's overall score is the run's weighted sum of its metric scores (the run's "
                    "`weights.*`), set to 0 when the judge found a hallucination: the question-level form of "
                    "the run's `(1 - hallucination_rate)` penalty. The diamond can therefore differ from the "
                    "run's overall_score, which multiplies the mean weighted score by (1 - hallucination_rate); "
                    "the CIs and tests above use the run's own formula on resampled questions.",
    "quality_vs_cost": "{objective} (whiskers: {level} CI) against {axis} per configuration (beyond 10, the best 10 "
                       "are labelled with their rank in the table).",
    "heatmap": "{objective} over the grid of the two swept settings; the best cell says so.",
    "embedding_map": "The best configuration's questions and the chunks they ranked, on 2 PCA axes of its retriever's "
                     "embeddings (left: retrieval hit or miss; right: judged score). Every run's points are in its "
                     "embedding_map.json artifact.",
}


def fmt(value: float) -> str:
    if value is None or math.isnan(value):
        return "—"
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 1000:
        return f"{value:,.0f}"
    if size >= 1:
        return f"{value:#.4g}".rstrip(".")  # 7.360, 16.20, 123.4
    return f"{value:.3f}" if size >= 0.01 else f"{value:.3g}"


def fmt_ci(interval: Interval | None) -> str:
    if interval is None:
        return "—"
    if math.isnan(interval.low):
        return fmt(interval.estimate)
    return f"{fmt(interval.estimate)} [{fmt(interval.low)}, {fmt(interval.high)}]"


def fmt_p(p: float) -> str:
    if p is None or math.isnan(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    highlight: int | None = None  # row drawn as the best

    def markdown(self) -> str:
        cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
        lines = ["| " + " | ".join(cell(h) for h in self.headers) + " |",
                 "| " + " | ".join("---" for _ in self.headers) + " |"]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        return "\n".join(lines)

    def html(self) -> str:
        head = "".join(f"<th>{inline(h)}</th>" for h in self.headers)
        body = "".join(
            f"<tr{' class=best' if i == self.highlight else ''}>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>"
            for i, row in enumerate(self.rows))
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def inline(text: str) -> str:
    """The few Markdown inline forms used here (`code`, **bold**) as HTML."""
    escaped = html.escape(str(text))
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", escaped)


def verdict_mark(entry: Entry) -> str:
    return "**best**" if entry.verdict == "best" else entry.verdict


def leaderboard_table(board: Leaderboard) -> Table:
    requests = REQUESTS if any(e.value(REQUESTS) > 0 for e in board.entries) else None  # NaN > 0 is False
    extra = [m for m in (board.cost_metric, board.time_metric, requests) if m and m != board.objective]
    headers = ["#", "configuration", *board.param_columns, f"{board.objective} [{board.level:.0%} CI]",
               "Δ vs best [CI]", "p (Holm)", "verdict", "failed / questions", *extra]
    rows = []
    for rank, entry in enumerate(board.entries, start=1):
        c = entry.comparison
        delta = fmt_ci(c.test.difference) if c and c.test else "—"
        rows.append([str(rank), entry.label, *[entry.params.get(p, "—") for p in board.param_columns],
                     fmt_ci(entry.values.get(board.objective)), delta, fmt_p(c.p_holm) if c else "—",
                     verdict_mark(entry), failed_of(entry), *[fmt_ci(entry.values.get(m)) for m in extra]])
    return Table(headers, rows, highlight=0)


def failed_of(entry: Entry) -> str:
    failed, total = entry.value("failed_questions"), entry.value("total_questions")
    if math.isnan(total):
        total = float(len(entry.run.table))
        failed = float((entry.run.table.get("status") == "failed").sum()) if "status" in entry.run.table else 0.0
    return f"{failed:.0f} / {total:.0f}"


def aggregates_table(board: Leaderboard) -> Table:
    metrics = [m for m in board.metrics]
    rows = [[e.label, *[fmt_ci(e.values.get(m)) for m in metrics]] for e in board.entries]
    return Table(["configuration", *metrics], rows, highlight=0)


def slices_table(board: Leaderboard) -> Table | None:
    """The objective per slice of the questions (kind, source), with CIs, per configuration."""
    metrics = slice_metrics(board)
    if not metrics:
        return None
    rows = [[e.label, *[fmt_ci(e.values.get(m)) for m in metrics]] for e in board.entries]
    return Table(["configuration", *[m.split("/", 1)[1] for m in metrics]], rows, highlight=0)


def calibration_table(board: Leaderboard) -> Table | None:
    """How well the judge agrees with people, from `python -m ragexp.calibrate` runs of this judge."""
    rows = []
    for run in board.selection.calibrations:
        metrics = sorted({k.split("_", 1)[1] for k in run.metrics if k.startswith("questions_")})
        for metric in metrics:
            cell = [run.metrics.get(f"{s}_{metric}") for s in ("spearman", "kappa", "mae", "bias", "krippendorff_alpha")]
            rows.append([run.tags.get("judge", ""), run.tags.get("ragexp.calibrates", "")[:8], metric,
                         str(int(run.metrics[f"questions_{metric}"])), *["—" if v is None else fmt(v) for v in cell]])
    if not rows:
        return None
    return Table(["judge", "judged run", "metric", "questions", "Spearman", "kappa", "MAE", "bias",
                  "annotators' alpha"], rows)


def corrected_table(board: Leaderboard) -> Table | None:
    """`--labels`: each configuration's labelled metrics, judge-only and human-corrected (PPI)."""
    if not board.corrected:
        return None
    rows = [[c.run.name, c.metric, str(c.judge.questions), str(c.corrected.labelled if c.corrected else 0),
             c.judge.shown(), c.corrected.shown() if c.corrected else "— (fewer than 2 labels)"] for c in board.corrected]
    return Table(["configuration", "metric", "judged questions", "labelled", "judge only",
                  "human-corrected (PPI)"], rows)


CORRECTED_NOTE = ("The judge's mean over each run's judged questions (Student t CI), and that mean minus the judge's "
                  "mean error on the questions people labelled (prediction-powered inference, Angelopoulos et al. "
                  "2023): unbiased whatever the judge's bias, valid when the labelled questions are a random part "
                  "of the run's.")


def comparisons_table(board: Leaderboard) -> Table:
    headers = ["configuration", "questions compared", "failed in either run", "in one run only",
               f"Δ {board.objective} vs best [CI]", "detects (80% power)", "p", "p (Holm)", "verdict"]
    if board.has_judge_spread:
        headers += ["judge sd / question", "judge sd of the mean"]
    rows = []
    for entry in board.entries:
        c = entry.comparison
        if c is None:
            row = [entry.label, "—", "—", "—", "(the best)", "—", "—", "—", verdict_mark(entry)]
        elif c.test is None:
            row = [entry.label, str(c.shared), str(c.failed), str(c.unmatched), f"not tested: {c.note}", "—", "—", "—",
                   verdict_mark(entry)]
        else:
            row = [entry.label, str(c.test.n), str(c.failed), str(c.unmatched), fmt_ci(c.test.difference),
                   fmt(detects(c, board)), fmt_p(c.test.p_value), fmt_p(c.p_holm), verdict_mark(entry)]
        if board.has_judge_spread:
            row += [fmt(entry.judge_sd) if entry.judge_sd is not None else "—",
                    fmt(entry.judge_sd_of_mean) if entry.judge_sd_of_mean is not None else "—"]
        rows.append(row)
    return Table(headers, rows, highlight=0)


def detects(c, board: Leaderboard) -> float:
    """The difference from the best that this comparison's questions detect with 80% power at the
    board's alpha (two-sided), from the width of its interval: a row '≈ best' says nothing about
    differences smaller than this."""
    return detectable_from_interval(c.test.difference.low, c.test.difference.high, board.level, board.alpha)


def rerun_table(board: Leaderboard) -> Table:
    return Table(["configuration", "run id"], [[e.label, f"`{e.run.run_id}`"] for e in board.entries])


def method(board: Leaderboard) -> str:
    direction = "higher" if board.maximize else "lower"
    return (f"Objective `{board.objective}` ({direction} is better). Intervals: {board.level:.0%} percentile "
            f"bootstrap over questions, {board.resamples:,} resamples, seed {board.seed}; each aggregate is "
            "recomputed from the run's per-question table and its logged value is shown. Each configuration "
            "is compared with the best on the questions both judged: a paired permutation test (the two runs' "
            f"scores swapped at random per question, {board.resamples:,} times) gives the p-value, a paired "
            "bootstrap the CI of the difference; p-values are Holm-corrected over the "
            f"{max(0, len(board.entries) - 1)} comparisons, at α = {board.alpha}. "
            + " ".join(f"**{word}**: {VERDICTS[word]}." for word in ("≈ best", "worse before Holm", "detects"))
            + " Questions that failed in either run of a pair are left out of its test and counted in the "
            "comparisons table.")


def header_lines(board: Leaderboard) -> list[str]:
    selection = board.selection
    tags = {t for r in selection.runs if (t := r.tags.get("judge")) is not None}
    questions = sorted({len(r.table) for r in selection.runs})
    lines = [f"Experiment `{selection.experiment}` at `{selection.tracking_uri}`"
             + (f", sweep parent run `{selection.parent.run_id}`" if selection.parent else "")
             + f"; {len(board.entries)} configurations; questions per run: {', '.join(map(str, questions))}"
             + (f"; judge: {', '.join(sorted(tags))}" if tags else "") + "."]
    lines.append(f"Made {time.strftime('%Y-%m-%d %H:%M:%S')} by `python -m ragexp.compare`.")
    return lines


def blocks(board: Leaderboard, plots: dict[str, Path]) -> list[tuple]:
    """The report as a list of blocks, rendered to Markdown and to HTML alike."""
    out: list[tuple] = [("h1", f"ragexp leaderboard: {board.selection.title}")]
    out += [("p", line) for line in header_lines(board)]
    if board.selection.incomplete:
        out += [("h2", "Incomplete sweep"), ("p", f"**This sweep is incomplete**: {board.selection.incomplete}. "
                                                  "The leaderboard ranks only the jobs that finished.")]
        out += [("list", board.selection.failed_jobs)] if board.selection.failed_jobs else []
    out += [("p", method(board)), ("h2", "Leaderboard"), ("table", leaderboard_table(board)),
            ("h2", "Paired comparisons with the best"), ("table", comparisons_table(board))]
    if board.has_judge_spread:
        out.append(("p", "Judge spread: the mean, over questions, of the judge's standard deviation across its "
                         "repeats (`<metric>_std` columns, combined with the objective's weights as if fully "
                         "correlated), and what it implies for the run's mean (sd / sqrt(repeats), over questions). "
                         "A difference smaller than this is within the judge's own noise."))
    calibration = calibration_table(board)
    if calibration is not None:
        out += [("h2", "Judge calibration against human labels"),
                ("p", "From `python -m ragexp.calibrate` runs of this judge: how far its scores can be trusted "
                      "(annotators' alpha: their own agreement, the ceiling)."), ("table", calibration)]
    corrected = corrected_table(board)
    if corrected is not None:
        out += [("h2", f"Human-corrected means ({board.level:.0%} CI)"), ("p", CORRECTED_NOTE), ("table", corrected)]
    slices = slices_table(board)
    if slices is not None:
        out += [("h2", f"{board.objective} per slice of the questions ({board.level:.0%} CI)"), ("table", slices)]
    out += [("h2", f"All aggregates ({board.level:.0%} CI)"), ("table", aggregates_table(board))]
    if plots:
        out.append(("h2", "Plots"))
        axis = board.cost_metric or board.time_metric
        for name, path in plots.items():
            caption = CAPTIONS[name].format(level=f"{board.level:.0%}", objective=board.objective, axis=axis)
            out.append(("img", name, path, caption))
    out += [("h2", "Re-running a configuration"),
            ("p", "`python -m ragexp.compare --rerun RUN_ID` prints the command that downloads the run's "
                  "logged `config.yaml` and runs it again."),
            ("table", rerun_table(board))]
    if board.notes:
        out += [("h2", "Notes"), ("list", board.notes)]
    return out


def markdown(parts: list[tuple]) -> str:
    text = []
    for block in parts:
        kind = block[0]
        if kind == "h1":
            text.append(f"# {block[1]}")
        elif kind == "h2":
            text.append(f"## {block[1]}")
        elif kind == "p":
            text.append(block[1])
        elif kind == "table":
            text.append(block[1].markdown())
        elif kind == "img":
            text.append(f"![{block[1]}](plots/{block[2].name})\n\n*{block[3]}*")
        elif kind == "list":
            text.append("\n".join(f"- {item}" for item in block[1]))
    return "\n\n".join(text) + "\n"


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f3f3f3}tr.best td{background:#fdebd9;font-weight:600}code{background:#f3f3f3;padding:1px 3px}
figure{margin:1.5em 0}figcaption{font-size:13px;color:#555;max-width:900px}img{max-width:100%}"""


def html_page(parts: list[tuple], title: str) -> str:
    body = []
    for block in parts:
        kind = block[0]
        if kind in ("h1", "h2"):
            body.append(f"<{kind}>{inline(block[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{inline(block[1])}</p>")
        elif kind == "table":
            body.append(block[1].html())
        elif kind == "img":
            data = base64.b64encode(block[2].read_bytes()).decode()
            body.append(f'<figure><img alt="{block[1]}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{inline(block[3])}</figcaption></figure>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{inline(item)}</li>" for item in block[1]) + "</ul>")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def as_json(board: Leaderboard) -> dict:
    def interval(i: Interval | None):
        return None if i is None else [None if math.isnan(v) else v for v in (i.estimate, i.low, i.high)]

    entries = []
    for e in board.entries:
        c = e.comparison
        entries.append({
            "run_id": e.run.run_id, "label": e.label, "params": e.params, "verdict": e.verdict,
            "values": {m: interval(v) for m, v in e.values.items()},
            "comparison": None if c is None else {
                "difference": interval(c.test.difference) if c.test else None,
                "detectable": detects(c, board) if c.test else None,
                "p_value": c.test.p_value if c.test else None, "p_holm": None if math.isnan(c.p_holm) else c.p_holm,
                "questions_compared": c.test.n if c.test else 0, "failed_in_either": c.failed,
                "in_one_run_only": c.unmatched, "note": c.note},
            "judge_sd": e.judge_sd, "judge_sd_of_mean": e.judge_sd_of_mean,
        })
    return {"objective": board.objective, "maximize": board.maximize, "level": board.level, "alpha": board.alpha,
            "resamples": board.resamples, "seed": board.seed, "param_columns": board.param_columns,
            "parent_run_id": board.selection.parent.run_id if board.selection.parent else None,
            "tracking_uri": board.selection.tracking_uri, "entries": entries, "notes": board.notes,
            "incomplete": board.selection.incomplete or None, "failed_jobs": board.selection.failed_jobs,
            "corrected": [c.to_json() for c in board.corrected]}


def write(board: Leaderboard, folder: Path, with_plots: bool = True) -> dict[str, Path]:
    """report.md, report.html, leaderboard.json and plots/*.png in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    plots = {}
    if with_plots:
        plots = draw_all(board, folder / "plots")
        best_map = embedding_map_of(board.best.run, board.selection.tracking_uri, folder / "plots")
        if best_map is not None:
            plots["embedding_map"] = best_map
    parts = blocks(board, plots)
    files = {"markdown": folder / "report.md", "html": folder / "report.html", "json": folder / "leaderboard.json"}
    files["markdown"].write_text(markdown(parts), encoding="utf-8")
    files["html"].write_text(html_page(parts, f"ragexp leaderboard: {board.selection.title}"), encoding="utf-8")
    files["json"].write_text(json.dumps(as_json(board), indent=2) + "\n", encoding="utf-8")
    return {**files, **plots}


def embedding_map_of(run, tracking_uri: str | None, folder: Path) -> Path | None:
    """The run's embedding map drawn from its points (embedding_map.json: in its run folder, or one
    artifact read from MLflow), or None when it has none (a retriever without embeddings,
    embedding_map=false). Nothing is embedded."""
    points = map_points(run, tracking_uri)
    if points is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return draw(points, folder / MAP_IMAGE)


def map_points(run, tracking_uri: str | None) -> dict | None:
    if run.folder is not None:  # a leaderboard of run folders (a racing sweep's survivors)
        file = run.folder / MAP_POINTS
        return json.loads(file.read_text()) if file.exists() else None
    import tempfile

    import mlflow

    database = database_of(tracking_uri) if tracking_uri else None
    if database is not None and not database.exists():  # reading a report never makes a store
        return None
    client = mlflow.MlflowClient(tracking_uri)
    try:
        if MAP_POINTS not in {a.path for a in client.list_artifacts(run.run_id)}:
            return None
        with tempfile.TemporaryDirectory() as tmp:
            return json.loads(Path(client.download_artifacts(run.run_id, MAP_POINTS, tmp)).read_text())
    except Exception as err:  # noqa: BLE001 - the map is one picture of the report: never the report's end
        log.warning("no embedding map in the report: run %s's points cannot be read (%s: %s)", run.run_id,
                    type(err).__name__, str(err).splitlines()[0][:200])
        return None


def log_to_parent(board: Leaderboard, folder: Path) -> str | None:
    """Logs the report folder as `report/` of the sweep's parent run (a later one as its folder's
    name, `report-2/`: `artifact_dir`); returns the run id."""
    parent = board.selection.parent
    if parent is None:
        return None
    import mlflow

    client = mlflow.MlflowClient(board.selection.tracking_uri)
    client.log_artifacts(parent.run_id, str(folder), artifact_dir(folder))
    client.set_tag(parent.run_id, "ragexp.report", f"{artifact_dir(folder)}/report.html")
    log_places(client, board)
    return parent.run_id


def log_places(client, board: Leaderboard | None, out: dict[str, str] | None = None) -> None:
    """Each configuration's place on the leaderboard, on its own run, so that MLflow's runs table sorts
    and filters the sweep's runs by it: the metrics `leaderboard_rank` (1: the best) and the
    objective's interval (`<objective>_ci_low`, `<objective>_ci_high`), and the tag `ragexp.verdict`
    (best, ≈ best, worse, ...: the report's words). A later comparison writes its own over them.
    `out`: runs of the sweep with no place on the board (run id -> the verdict that says why: a racing
    sweep's configurations dropped or failed before its last round), tagged with that verdict only,
    never ranked."""
    from mlflow.entities import Metric, RunTag

    from ragexp.base.redact import masked
    from ragexp.store.ui_links import RANK, VERDICT

    now = int(time.time() * 1000)
    entries, objective = (board.entries, board.objective) if board is not None else ([], "")
    for rank, entry in enumerate(entries, start=1):
        metrics = [Metric(RANK, float(rank), now, 0)]
        interval = entry.values.get(objective)
        if interval is not None and math.isfinite(interval.low) and math.isfinite(interval.high):
            metrics += [Metric(f"{objective}_ci_low", round(float(interval.low), 4), now, 0),
                        Metric(f"{objective}_ci_high", round(float(interval.high), 4), now, 0)]
        client.log_batch(entry.run.run_id, metrics=metrics, tags=[RunTag(VERDICT, masked(entry.verdict or "not tested"))])
    for run_id, verdict in (out or {}).items():
        client.set_tag(run_id, VERDICT, masked(verdict))


def artifact_dir(folder: Path) -> str:
    """The sweep's own report is `report/`; a later one beside it (report-2) keeps its folder's name."""
    return folder.name if folder.name.startswith(f"{ARTIFACT_DIR}-") else ARTIFACT_DIR
