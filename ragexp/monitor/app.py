"""The job behind `python -m ragexp.monitor`: read the log, summarise and judge each window,
log to MLflow, check the alert rules against the baseline, write the reports, notify."""
from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, OmegaConf

from ragexp.base.redact import from_environment, written_config
from ragexp.errors import BAD_INPUT, GATE_FAILED, RUN_FAILED, RagexpError, StoreUnreachable
from ragexp.monitor import ab as ab_test
from ragexp.monitor import alerts as alerting
from ragexp.monitor.report import ab_plot, console, plot, write_json, write_reports
from ragexp.monitor.tracking import MonitorStore
from ragexp.config.validation import validate
from ragexp.monitor.traces import export_traces
from ragexp import __version__
from ragexp.store.provenance import git_commit
from ragexp.monitor.alerts import post

if TYPE_CHECKING:
    from ragexp.monitor.windows import Reservoir

log = logging.getLogger("ragexp.monitor")
ALERTS_FIRED = GATE_FAILED  # exit status when an alert fires: the same as a failed quality gate


def execute(cfg: DictConfig) -> int:
    from hydra.core.hydra_config import HydraConfig

    try:
        return monitor(cfg, Path(HydraConfig.get().runtime.output_dir))
    except StoreUnreachable as err:  # not the user's input: the store did not answer
        print(f"ragexp.monitor: error: {err}", file=sys.stderr)
        return RUN_FAILED
    except RagexpError as err:
        print(f"ragexp.monitor: error: {err}", file=sys.stderr)
        return BAD_INPUT


def monitor(cfg: DictConfig, out: Path) -> int:
    """Everything one invocation does; returns the exit status (0, ALERTS_FIRED, or RUN_FAILED when
    MLflow logging failed: the alerts still went out and the outputs are on disk, as with
    `python -m ragexp`, which exits 4 when it cannot log)."""
    from ragexp.monitor.records import Columns, LogReader, Malformed
    from ragexp.monitor.windows import Summary, iso
    from ragexp.config.build import build

    validate(cfg)  # every setting (monitor.*: ragexp.monitor.settings) and component, all problems at once
    m = cfg.monitor
    source = m.source
    malformed = Malformed(m.on_error)
    columns = Columns(OmegaConf.to_container(m.columns, resolve=True) if m.get("columns") and source == "file" else None,
                      m.get("feedback_satisfied_from"))
    if source == "mlflow":  # the experiment's traces, as a log in the default columns (ragexp.monitor.traces)

        t = m.traces
        path, count = export_traces(t.experiment, t.get("tracking_uri"), t.get("run_id"), out / "traces-input.jsonl")
        log.info("%d traces of experiment %r read into %s", count, t.experiment, path)
        readers = [LogReader(path, columns, malformed, "jsonl", m.max_field_bytes)]
    elif source == "otlp":  # OpenTelemetry spans, as a log in the default columns (ragexp.monitor.spans)
        from ragexp.monitor.spans import export_spans

        otlp = OmegaConf.to_container(m.otlp, resolve=True) if m.get("otlp") else {}
        read = export_spans(input_files(m.input), otlp, malformed, out / "spans-input.jsonl")
        log.info("%d spans of %s read into %d records in %s", read.spans, m.input, read.records, read.path)
        readers = [LogReader(read.path, columns, malformed, "jsonl", m.max_field_bytes)]
    else:
        readers = [LogReader(path, columns, malformed, m.format, m.max_field_bytes) for path in input_files(m.input)]
    reader = readers[0]
    described = str(reader.path.resolve()) if len(readers) == 1 else f"{m.input} ({len(readers)} files)"
    ab = ab_test.ABSettings.of(OmegaConf.to_container(m.ab, resolve=True) if m.get("ab") else None)
    summary = Summary(m.window, m.judge_sample, m.seed, m.exact_percentiles_max, ab is not None,
                      ab.since if ab else None)
    rules = alerting.rules_from(OmegaConf.to_container(cfg.alerts, resolve=True) if cfg.get("alerts") else None)
    llm = build(cfg.llm)
    if llm.dry_run:
        raise RagexpError("dry_run: not supported by ragexp.monitor (it judges a sample: monitor.judge_sample=0 judges none)")
    store = MonitorStore(build(cfg.tracker))
    baseline = store.baseline(m.baseline)  # a bad baseline stops the job before the log is read
    sample_judge = prepare_judge(cfg, llm) if m.judge_sample else None
    name = m.get("name") or f"monitor {reader.path.stem}"
    try:
        started, cpu_started = time.perf_counter(), time.process_time()
        for number, each in enumerate(readers):
            summary.add(each, number)
        read_s, read_cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        if not summary.records:
            raise RagexpError(f"monitor.input: no well-formed record in {', '.join(str(r.path) for r in readers)} "
                              f"({sum(r.lines for r in readers)} lines, {malformed.count} malformed)")
        windows: list[dict] = []
        judged: list = []
        for window in summary.ordered():
            windows.append({"window": iso(window.start), "window_end": iso(window.end), "start": window.start,
                            "end": window.end, "metrics": window.stats(llm.prices, m.model), "run_id": None})
        if ab is not None:
            for index, variant, arm in summary.ordered_arms():
                windows[index].setdefault("variants", {})[variant] = arm.stats(llm.prices, m.model)
        if sample_judge is not None:
            judged = judge_windows(sample_judge, summary, windows, columns, readers)
        totals = {"records": summary.records, "malformed_lines": malformed.count, "windows": len(windows),
                  "read_s": round(read_s, 3), "read_cpu_s": round(read_cpu_s, 3), **llm.stats()}
    finally:
        llm.close()
    notes = []
    unpriced = sorted({str(model or m.model) for w in summary.windows.values() for model in w.tokens
                       if not llm.prices.known(model or m.model)})
    if unpriced:
        notes.append(f"no price in llm.prices for model(s) {', '.join(unpriced)}: their tokens cost 0 "
                     "(add +llm.prices.NAME={input:..,output:..})")
    if malformed.count:
        notes.append(f"{malformed.count} malformed lines skipped (monitor.on_error=skip): "
                     + "; ".join(malformed.examples[:5]) + (" ..." if malformed.count > 5 else ""))
    if baseline and sample_judge and baseline.get("judge") and baseline["judge"] != sample_judge.judge.name:
        notes.append(f"baseline run {baseline['name']!r} was judged by {baseline['judge']!r}, this sample by "
                     f"{sample_judge.judge.name!r}: their scores may not be comparable")
    found, rule_notes = alerting.evaluate(rules, windows, baseline)
    notes += rule_notes
    tested = None
    if ab is not None:
        tested = ab_test.run(ab, summary, windows, judged)
        found = alerting.ordered(found + ab_test.alerts(tested, windows))
        notes += ab_test.notes(tested)
    elif summary.variant_names:
        shown_names = ", ".join(sorted(summary.variant_names)[:5])
        notes.append(f"the records carry variants ({shown_names}): monitor.ab.control=<one of them> compares them "
                     "in an A/B test")
    out.mkdir(parents=True, exist_ok=True)
    alerts_file = out / "alerts.json"
    payload = {"source": "ragexp.monitor", "input": described, "name": name,
               "baseline": {k: baseline[k] for k in ("run_id", "name")} if baseline else None, "alerts": found}
    write_json(alerts_file, payload)  # first: whatever fails later, the alerts are on disk
    tags = {"monitor.input": described, "monitor.window": str(m.window),
            "judge": sample_judge.judge.name if sample_judge else "none", **git_tags()}
    if baseline:
        tags["monitor.baseline"] = baseline["run_id"]
    logging_failed = None
    try:
        config = written_config(cfg)
        if config["monitor"].get("webhook_url") and not from_environment(config["monitor"]["webhook_url"]):
            # a webhook URL often carries its token: never logged (${oc.env:NAME} is logged as it is)
            config["monitor"]["webhook_url"] = shown(config["monitor"]["webhook_url"])
        parent = store.log(name, config, windows, totals, tags, tested)
    except Exception as err:  # noqa: BLE001 - the alerts still go out (printed, alerts.json, webhook); exit 4 at the end
        parent, logging_failed = None, str(err).splitlines()[0][:300] if str(err) else type(err).__name__
        print(f"ragexp.monitor: error: MLflow logging failed ({logging_failed}); the outputs are in {out}", file=sys.stderr)
    run_of = {w["window"]: w["run_id"] for w in windows}
    for alert in found:
        alert["run_id"] = run_of.get(alert["window"])
    payload["mlflow_run"] = parent
    write_json(alerts_file, payload)
    write_judged(out / "judged.jsonl", judged)
    summary_file = write_json(out / "windows.json", {
        "input": described, "window": str(m.window), **totals,
        "malformed_examples": malformed.examples, "baseline": payload["baseline"], "windows": windows})
    ab_file = write_json(out / "ab.json", tested) if tested is not None else None
    png = plot(windows, out / "monitor.png", found)
    facts = [f"input: {described} ({summary.records} records, {malformed.count} malformed lines)",
             f"windows of {m.window} (UTC): {len(windows)}; read in {read_s:.1f} s",
             f"judge: {tags['judge']}, {m.judge_sample} sampled records per {'variant per ' if ab else ''}window "
             f"(seed {m.seed})",
             f"baseline: {baseline['name']} ({baseline['run_id']})" if baseline else "baseline: none"]
    told = ab_test.lines(tested) if tested is not None else []
    ab_png = ab_plot(tested, out / "ab.png") if tested is not None else None
    reports = write_reports(out, name, windows, found, notes, facts, png, told, ab_png)
    store.finish(parent, found, windows, [alerts_file, summary_file, out / "judged.jsonl", *reports,
                                          *([png] if png else []), *([ab_file] if ab_file else []), *([ab_png] if ab_png else [])])
    print(console(windows, found, notes, told))
    print(f"output: {out}" + (f"\ntracked: {store.where()}, run {parent}" if parent else ""))
    if found:
        print(f"ragexp.monitor: {len(found)} alert(s) fired; written to {alerts_file}", file=sys.stderr)
        if m.get("webhook_url"):
            notify(m, payload, alerts_file)
    if logging_failed:
        return RUN_FAILED
    return ALERTS_FIRED if found else 0


def prepare_judge(cfg: DictConfig, llm):
    """The judge group's judge, connected to the LLM session, behind the stage cache and the
    embedding cache as in the pipeline (`Work`: its embedders share one embedding cache)."""
    from ragexp.monitor.judging import SampleJudge
    from ragexp.config.build import build
    from ragexp.run.work import Work

    work = Work(build(cfg.cache))
    with work.embeddings.building():  # the judge's embedder (offline judge) uses the run's embedding cache
        judge = build(cfg.judge)
    llm.connect(judge=judge)  # API key, endpoint reachable
    return SampleJudge(judge, work, OmegaConf.to_container(cfg.judge, resolve=True))


def judge_windows(sample_judge, summary, windows: list[dict], columns, readers) -> list:
    """Judges every sample at once (the judge's concurrency spans windows): each window's, or in
    an A/B test each variant's of each window; adds the scores to each window's metrics (in an A/B
    test those of all its variants' samples) and to each variant's. Returns (window, variant,
    Sampled) for judged.jsonl."""
    samples: list[tuple[int, str | None, Reservoir]] = [(i, None, w.sample) for i, w in enumerate(summary.ordered())]
    samples += [(index, variant, arm.sample) for index, variant, arm in summary.ordered_arms()]
    items, owners = [], []
    for index, variant, sample in samples:
        for source, line, row in sorted(sample.items, key=lambda item: item[:2]):
            reader = readers[source]
            items.append((f"{reader.path}:{line}", *columns.content(row, reader.header)))
            owners.append((index, variant))
    judged = sample_judge.judge_all(items)
    by_window: dict[int, list] = {}
    by_variant: dict[tuple[int, str | None], list] = {}
    for (index, variant), one in zip(owners, judged):
        by_window.setdefault(index, []).append(one)
        by_variant.setdefault((index, variant), []).append(one)
    for index, window in enumerate(windows):
        window["metrics"].update(sample_judge.window_scores(by_window.get(index, [])))
        for variant, stats in window.get("variants", {}).items():
            stats.update(sample_judge.window_scores(by_variant.get((index, variant), [])))
    return [(windows[index]["window"], variant, one) for (index, variant), one in zip(owners, judged)]


def write_judged(path: Path, judged: list) -> None:
    """One line per sampled record: where it is, what was asked and answered, the judge's verdict."""
    with path.open("w", encoding="utf-8") as out:
        for window, variant, s in judged:
            j = s.judgement
            out.write(json.dumps({"window": window, **({"variant": variant} if variant is not None else {}),
                                  "where": s.where, "query": s.query, "answer": s.answer,
                                  "judge": j.judge if j else None, "scores": j.scores if j else None,
                                  "hallucination": j.hallucination if j else None,
                                  "reasoning": j.reasoning if j else None, "failure": s.failure}) + "\n")


def input_files(given: str) -> list[Path]:
    """`monitor.input`: a file, or a glob pattern (`logs/*.jsonl`) read in name order, e.g. every
    day's log since an A/B test's start."""
    if not any(c in str(given) for c in "*?["):
        return [Path(given)]
    pattern = Path(given).expanduser()
    root = Path(pattern.anchor) if pattern.is_absolute() else Path()
    found = sorted(p for p in root.glob(str(pattern.relative_to(root) if pattern.is_absolute() else pattern)) if p.is_file())
    if not found:
        raise RagexpError(f"monitor.input: no file matches {given!r} (looked from {Path.cwd()})")
    return found


def git_tags() -> dict[str, str]:
    return {"git_commit": git_commit(), "ragexp_version": __version__}


def shown(url: str) -> str:
    """A webhook URL as printed and logged: scheme and host only (its path or user part may be its secret)."""
    from urllib.parse import urlsplit

    parts = urlsplit(str(url))
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}/..."


def notify(m: DictConfig, payload: dict, alerts_file: Path) -> None:
    delivered, attempts, error = post(str(m.webhook_url), payload, int(m.webhook_retries), float(m.webhook_backoff_s),
                                      float(m.webhook_timeout_s))
    if delivered:
        print(f"alerts posted to {shown(m.webhook_url)} (attempt {attempts})")
    else:
        print(f"ragexp.monitor: warning: webhook {shown(m.webhook_url)} failed after {attempts} attempt(s) ({error}); "
              f"the alerts are in {alerts_file}", file=sys.stderr)
