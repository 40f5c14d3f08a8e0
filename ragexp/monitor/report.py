"""What a monitor run leaves in its output folder: windows.json (every window's metrics),
alerts.json, judged.jsonl (the judged sample), monitor.png (the time series) and report.md /
report.html (a summary), plus the console table."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Sequence

from ragexp.monitor.alerts import describe
from datetime import UTC

COLUMNS = (("requests", "requests", "{:.0f}"), ("p50 ms", "latency_p50_ms", "{:.0f}"), ("p95 ms", "latency_p95_ms", "{:.0f}"),
           ("p99 ms", "latency_p99_ms", "{:.0f}"), ("errors", "error_rate", "{:.2%}"),
           ("satisfied", "satisfaction_rate", "{:.1%}"), ("cost $", "cost_usd", "{:.2f}"), ("judged", "judged_records", "{:.0f}"))
PANELS = (("latency (ms)", ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms")), ("error rate", ("error_rate",)),
          ("satisfaction rate", ("satisfaction_rate",)), ("requests", ("requests",)), ("cost (USD)", ("cost_usd",)))


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def judge_columns(windows: list[dict]) -> list[tuple[str, str, str]]:
    keys = dict.fromkeys(k for w in windows for k in w["metrics"] if k.startswith("avg_") or k == "hallucination_rate")
    return [(k.removeprefix("avg_"), k, "{:.3f}") for k in keys]


def table(windows: list[dict]) -> list[list[str]]:
    columns = [*COLUMNS, *judge_columns(windows)]
    rows = [["window", *(c[0] for c in columns)]]
    for w in windows:
        rows.append([w["window"], *(c[2].format(w["metrics"][c[1]]) if c[1] in w["metrics"] else "—" for c in columns)])
    return rows


def markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * len(rows[0])]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def console(windows: list[dict], alerts: list[dict], notes: list[str], ab: Sequence[str] = ()) -> str:
    rows = table(windows)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width) in enumerate(zip(r, widths)))
             for r in rows]
    lines += list(ab)
    lines += [f"note: {n}" for n in notes]
    lines += [f"ALERT {describe(a)}" for a in alerts] or ["no alert"]
    return "\n".join(lines)


def plot(windows: list[dict], path: Path, alerts: list[dict]) -> Path | None:
    """One panel per family of metrics over the windows' starts (plus the judge's scores); the
    windows with an alert are marked in red."""
    from datetime import datetime

    from matplotlib.figure import Figure

    if not windows:
        return None
    panels = [*PANELS, *(((f"judge: {k.removeprefix('avg_')}"), (k,)) for _, k, _ in judge_columns(windows))]
    panels = [(title, keys) for title, keys in panels if any(k in w["metrics"] for w in windows for k in keys)]
    times = [datetime.fromtimestamp(w["start"], UTC) for w in windows]
    alerted = {a["window"] for a in alerts}
    fig = Figure(figsize=(9, 2.2 * len(panels)), dpi=100, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (title, keys) in zip(axes, panels):
        for key in keys:
            points = [(t, w["metrics"][key]) for t, w in zip(times, windows) if key in w["metrics"]]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=key)
        for t, w in zip(times, windows):
            if w["window"] in alerted:
                ax.axvline(t, color="red", alpha=0.25, linewidth=4)
        ax.set_title(title, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7, loc="upper left")
    axes[-1].set_xlabel("window start (UTC); red: a window with an alert")
    fig.autofmt_xdate()
    fig.savefig(path)
    return path


def inline_png(png: Path | None, alt: str) -> str:
    return f'<img alt="{alt}" src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}">' if png else ""


def html_cells(rows: list[list[str]]) -> str:
    return "".join("<tr>" + "".join(f"<{'th' if i == 0 else 'td'}>{html.escape(c)}</{'th' if i == 0 else 'td'}>" for c in r)
                   + "</tr>" for i, r in enumerate(rows))


def variant_table(windows: list[dict]) -> list[list[str]]:
    """A row per window and variant (an A/B test's windows)."""
    columns = [*COLUMNS, *judge_columns([{"metrics": m} for w in windows for m in w.get("variants", {}).values()])]
    rows = [["window", "variant", *(c[0] for c in columns)]]
    for w in windows:
        for variant, metrics in sorted(w.get("variants", {}).items()):
            rows.append([w["window"], variant, *(c[2].format(metrics[c[1]]) if c[1] in metrics else "—" for c in columns)])
    return rows


def ab_plot(result: dict, path: Path) -> Path | None:
    """A panel per variant and metric of an A/B test: the difference from the control after each
    window and its anytime-valid interval narrowing around it; the window of a decision marked."""
    from datetime import datetime

    from matplotlib.figure import Figure

    shown = [d for d in result["decisions"] if d["path"]]
    if not shown:
        return None
    columns = min(3, len(shown))
    rows = -(-len(shown) // columns)
    fig = Figure(figsize=(4.2 * columns, 2.6 * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    colours = {"better": "tab:green", "worse": "tab:red", "no decision yet": "tab:blue"}
    for ax, d in zip(axes, shown):
        times = [datetime.fromisoformat(p[0].replace("Z", "+00:00")) for p in d["path"]]
        colour = colours[d["decision"]]
        ax.fill_between(times, [p[2] for p in d["path"]], [p[3] for p in d["path"]], color=colour, alpha=0.2, linewidth=0)
        ax.plot(times, [p[1] for p in d["path"]], color=colour, marker="o", markersize=3)
        ax.axhline(0, color="black", linewidth=0.8)
        if d["decided_at"]:
            ax.axvline(datetime.fromisoformat(d["decided_at"].replace("Z", "+00:00")), color=colour, linestyle="--")
        ax.set_title(f"{d['variant']} - {result['control']}: {d['metric']} ({d['decision']})", fontsize=8, loc="left")
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[len(shown):]:
        ax.set_visible(False)
    fig.suptitle("A/B: difference from the control after each window, with its anytime-valid interval", fontsize=9)
    fig.autofmt_xdate()
    fig.savefig(path)
    return path


def write_reports(folder: Path, title: str, windows: list[dict], alerts: list[dict], notes: list[str],
                  facts: list[str], png: Path | None, ab: Sequence[str] = (), ab_png: Path | None = None) -> tuple[Path, Path]:
    alert_lines = [f"- {describe(a)}" for a in alerts] or ["No alert."]
    md = [f"# {title}", "", *[f"- {f}" for f in facts], "", "## Windows", "", markdown_table(table(windows)), ""]
    if ab:
        md += ["## A/B test", "", ab[0], "", *[f"- {line.strip()}" for line in ab[1:]], "",
               *([f"![A/B test]({ab_png.name})", ""] if ab_png is not None else []), "### Per variant", "",
               markdown_table(variant_table(windows)), ""]
    md += ["## Alerts", "", *alert_lines, ""]
    if notes:
        md += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    if png is not None:
        md += ["## Time series", "", f"![time series]({png.name})", ""]
    markdown = folder / "report.md"
    markdown.write_text("\n".join(md))
    cells = html_cells(table(windows))
    image = inline_png(png, "time series")
    page = (f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
            "padding:2px 6px;text-align:right}.alert{color:#b00}</style>"
            f"<h1>{html.escape(title)}</h1><ul>{''.join(f'<li>{html.escape(f)}</li>' for f in facts)}</ul>"
            f"<h2>Windows</h2><table>{cells}</table>"
            + (f"<h2>A/B test</h2><p>{html.escape(ab[0])}</p><ul>{''.join(f'<li>{html.escape(x.strip())}</li>' for x in ab[1:])}"
               f"</ul>{inline_png(ab_png, 'A/B test')}<table>{html_cells(variant_table(windows))}</table>" if ab else "")
            + "<h2>Alerts</h2>"
            + ("".join(f"<p class='alert'>{html.escape(describe(a))}</p>" for a in alerts) or "<p>No alert.</p>")
            + (f"<h2>Notes</h2><ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>" if notes else "")
            + f"<h2>Time series</h2>{image}")
    page_path = folder / "report.html"
    page_path.write_text(page)
    return markdown, page_path
