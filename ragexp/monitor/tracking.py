"""The monitor in MLflow: one parent run per `python -m ragexp.monitor` invocation with every
window's metrics as a time series (step = the window's start in seconds since the epoch, metric
timestamp = the window's start), and one child run per window (started at the window's start,
ended at its end, tagged `window_start`), whose flat metrics make it a baseline for later runs.
Alerts are tagged on the window's run (`alert.<rule>`) and counted on both (`alerts`)."""
from __future__ import annotations

import re
from pathlib import Path

from ragexp.errors import RagexpError, StoreUnreachable
from ragexp.monitor.alerts import describe
from ragexp.monitor.windows import metric_suffix
from ragexp.store.run_config import flatten
from ragexp.store.lookup import run_absent
from ragexp.store.tracker_contract import Opened

RUN_ID = re.compile(r"[0-9a-f]{32}")


def logged(window: dict) -> dict[str, float]:
    """A window's metrics as logged: its own, then each variant's as `<variant>/<metric>`."""
    return {**window["metrics"], **{f"{metric_suffix(v)}/{k}": value for v, metrics in window.get("variants", {}).items()
                                    for k, value in metrics.items()}}


class MonitorStore:
    """MLflow through the `tracker` group: `tracker=none` logs nothing and reads no baseline."""

    def __init__(self, tracker):
        self.tracker = tracker
        self.active = tracker.given_store() is not None
        self.opened: Opened | None = None

    def store(self) -> Opened:
        """The tracker's MLflow store, opened once, and its experiment."""
        if self.opened is None:
            self.opened = self.tracker.opened()
        if self.opened is None:
            raise RagexpError("the monitor logs to and reads from MLflow: use tracker=mlflow")
        return self.opened

    def client(self):
        return self.store().client

    def where(self) -> str:
        return self.tracker.where()

    def baseline(self, spec: str | None) -> dict | None:
        """The run `spec` names (a run id, else the latest run of that name in any experiment)."""
        if not spec:
            return None
        if not self.active:
            raise RagexpError("monitor.baseline reads an MLflow run: use tracker=mlflow (and tracker.tracking_uri=...)")
        client, spec = self.client(), str(spec)
        run = None
        if RUN_ID.fullmatch(spec):
            try:
                run = client.get_run(spec)
            except Exception as err:  # noqa: BLE001 - absent (then looked up by name), or the store did not answer
                if not run_absent(err):
                    raise StoreUnreachable(f"monitor.baseline: cannot look up run {spec} in {self.where()} "
                                           f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
                run = None
        if run is None:
            if "'" in spec:
                raise RagexpError(f"monitor.baseline: {spec!r}: a run name cannot hold a quote")
            experiments = [e.experiment_id for e in client.search_experiments()]
            found = client.search_runs(experiments, f"attributes.run_name = '{spec}'",
                                       order_by=["attributes.start_time DESC"], max_results=1) if experiments else []
            if not found:
                raise RagexpError(f"monitor.baseline: no run with id or name {spec!r} in {self.where()}")
            run = found[0]
        return {"run_id": run.info.run_id, "name": run.info.run_name, "metrics": dict(run.data.metrics),
                "judge": run.data.tags.get("judge")}

    def log(self, name: str, config: dict, windows: list[dict], totals: dict, tags: dict,
            ab: dict | None = None) -> str | None:
        """The parent run and one child run per window; sets each window's `run_id`. In an A/B
        test a window's metrics per variant are logged as `<variant>/<metric>`, and the parent
        holds each decision (tag `ab.<variant>.<metric>`, metrics `ab.<variant>.<metric>.effect`,
        `.lower`, `.upper`)."""
        if not self.active:
            return None
        from mlflow.entities import Metric, Param, RunTag

        client, experiment = self.store()
        parent = client.create_run(experiment, run_name=name, tags={**tags, "ragexp.role": "monitor"}).info.run_id
        try:
            params = [Param(k[:250], v[:6000]) for k, v in flatten(config).items()]
            for start in range(0, len(params), 100):
                client.log_batch(parent, params=params[start:start + 100])
            series = [Metric(key, float(value), int(w["start"] * 1000), int(w["start"]))
                      for w in windows for key, value in logged(w).items()]
            last = int(windows[-1]["start"]) if windows else 0
            series += [Metric(key, float(value), int(windows[-1]["start"] * 1000) if windows else 0, last)
                       for key, value in totals.items()]
            decisions = (ab or {}).get("decisions", [])
            at = int(windows[-1]["start"] * 1000) if windows else 0
            series += [Metric(f"ab.{metric_suffix(d['variant'])}.{d['metric']}.{part}", float(d[key]), at, last)
                       for d in decisions for part, key in (("effect", "effect"), ("lower", "lower"), ("upper", "upper"))
                       if d[key] is not None]
            if decisions:
                client.log_batch(parent, tags=[RunTag(f"ab.{metric_suffix(d['variant'])}.{d['metric']}", d["decision"])
                                               for d in decisions])
            for start in range(0, len(series), 1000):
                client.log_batch(parent, metrics=series[start:start + 1000])
            for window in windows:
                start_ms, end_ms = int(window["start"] * 1000), int(window["end"] * 1000)
                child = client.create_run(experiment, run_name=f"{name} {window['window']}", start_time=start_ms, tags={
                    **tags, "mlflow.parentRunId": parent, "ragexp.role": "monitor-window",
                    "window_start": window["window"], "window_end": window["window_end"]}).info.run_id
                client.log_batch(child, metrics=[Metric(k, float(v), start_ms, int(window["start"]))
                                                 for k, v in logged(window).items()])
                client.set_terminated(child, "FINISHED", end_time=end_ms)
                window["run_id"] = child
        except Exception:
            client.set_terminated(parent, "FAILED")
            raise
        return parent

    def finish(self, parent: str | None, alerts: list[dict], windows: list[dict], files: list[Path]) -> None:
        """Alerts as tags, the output files as artifacts of the parent run, which then ends."""
        if parent is None:
            return
        client = self.client()
        by_run: dict[str, list[dict]] = {}
        for alert in alerts:
            by_run.setdefault(alert["run_id"], []).append(alert)
        for window in windows:
            fired = by_run.get(window["run_id"], [])
            client.set_tag(window["run_id"], "alerts", str(len(fired)))
            for alert in fired:
                client.set_tag(window["run_id"], f"alert.{alert['rule']}", describe(alert)[:5000])
        client.set_tag(parent, "alerts", str(len(alerts)))
        for file in files:
            if file.exists():
                client.log_artifact(parent, str(file))
        client.set_terminated(parent, "FINISHED")
