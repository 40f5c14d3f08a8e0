"""The MLflow UI link: where MLflow's UI shows a run's evaluation view or an experiment's runs table,
and the shared runs-table view a sweep's link opens in."""
from __future__ import annotations

import json
from urllib.parse import quote

from ragexp.base.redact import scrub_url


def runs_view_link(tracking_uri: str, experiment_id: str, run_id: str | None = None, view: str | None = None) -> str:
    """The line that opens a run's evaluation view (`run_id`: one row per question, with its answer,
    expected answer and assessments) or, for a sweep, the experiment's runs table. MLflow 3.17's UI opens an experiment on
    its GenAI overview unless the URL names a page: `runs/RUN/traces` is the run's Traces tab, its questions
    as rows with the judge's scores as columns and their averages above them (MLflow shows the first
    assessments up to ten columns in all, the others are one click away in *Columns*; clicking a row
    shows the judge's rationale); `runs?workflowType=machine_learning` the runs table (its experiment page reads that query
    parameter before the choice it keeps in localStorage). A tracking server serves the UI
    at its own address; a local store (sqlite:///mlflow.db, ./mlruns) needs a UI over it: `python -m ragexp.ui`.
    `view`: the key of a shared view of the runs table (`MlflowTracker.share_view`) the page opens in."""
    address = ui_address(tracking_uri, page(experiment_id, run_id, view))
    return f"MLflow UI: {address}" if address else ""


def page(experiment_id: str, run_id: str | None = None, view: str | None = None, sweep: str | None = None) -> str:
    """The `#/...` page of MLflow's UI that shows run `run_id`'s questions, or the experiment's runs
    table (in the shared view `view` when given, else filtered to the runs of the sweep `sweep`)."""
    if run_id:
        return f"#/experiments/{experiment_id}/runs/{run_id}/traces"
    query = f"&{VIEW_KEY}={view}" if view else (f"&searchFilter={quote(sweep_filter(sweep))}" if sweep else "")
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning{query}"


def sweep_filter(parent_id: str, placed_only: bool = False) -> str:
    """The runs-table search that keeps the runs of one sweep: its jobs (nested under its parent run);
    `placed_only`: those with a verdict only (a racing sweep's: one run per configuration, its last)."""
    return f"tags.mlflow.parentRunId = '{parent_id}'" + (f" and tags.{VERDICT} LIKE '%'" if placed_only else "")


def ui_address(tracking_uri: str, path: str) -> str:
    """Where MLflow's UI shows `path` (a `#/...` page) of the store `tracking_uri`: a tracking server's
    own address, or `python -m ragexp.ui` over a local store; "" on Databricks."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"{scrub_url(tracking_uri.rstrip('/'))}/{path}"
    if tracking_uri.startswith("databricks"):
        return ""
    return f"python -m ragexp.ui --tracking-uri {tracking_uri} (MLflow's UI, light), then open http://127.0.0.1:5000/{path}"


# on each run of a sweep, its place on the leaderboard (ragexp.compare.report.log_places), which its view sorts by
RANK, VERDICT = "leaderboard_rank", "ragexp.verdict"
VIEW_KEY = "viewStateShareKey"  # the URL parameter naming a shared view of MLflow's runs table
SHARED_VIEW = "mlflow.sharedViewState."  # + the key: the experiment tag holding the view, as MLflow's Share button keeps it


def runs_view(metrics: list[str], params: list[str], sweep: str | None = None, rank: str | None = None,
              tags: tuple[str, ...] = (), placed_only: bool = False) -> str:
    """A runs-table view as MLflow's UI reads a shared one: the columns `rank`, `tags`, the first
    metric, the params, then the other metrics, in that order; sorted by `rank` (ascending) when
    given, else by the first metric, best first (sorting by a metric also lists a sweep's child runs
    as rows of their own); `sweep`: only that sweep's runs (`sweep_filter`, with `placed_only`)."""
    columns = ([f"metrics.`{rank}`"] if rank else []) + [f"tags.`{t}`" for t in tags] + \
        [f"metrics.`{m}`" for m in metrics[:1]] + [f"params.`{p}`" for p in params] + [f"metrics.`{m}`" for m in metrics[1:]]
    order = f"metrics.`{rank}`" if rank else f"metrics.`{metrics[0]}`" if metrics else "attributes.start_time"
    return json.dumps({"selectedColumns": columns, "columnOrder": columns, "orderByAsc": bool(rank),
                       "searchFilter": sweep_filter(sweep, placed_only) if sweep else "", "orderByKey": order}, sort_keys=True)
