"""Contracts with the private APIs ragexp uses: if a release changes one, these fail first, naming
the API, the version installed and the version tested (constraints.txt), instead of a sweep or a
trace log failing somewhere deep. The ranges in pyproject.toml stop where these were tested.

- Hydra: `hydra._internal.core_plugins.basic_sweeper.BasicSweeper.split_arguments` and
  `ConfigLoader.load_sweep_config` (ragexp.sweep.folder: every grid point checked before any job),
  `create_defaults_list` and `_compose_config_from_defaults_list` (ragexp.sweep.composed: shared by
  the points that choose the same options), and the basic sweeper's `_target_` (how a grid is
  told from a search).
- MLflow: `mlflow.tracing.client.TracingClient.start_trace` / `.log_spans` and
  `MlflowClient.link_traces_to_run` (ragexp.store.trace_store: traces of a finished run logged after the
  fact), `Span.from_dict` and the metadata / attribute keys it writes; what `start_trace` writes, in one
  transaction (`_get_store`, `SqlAlchemyStore._check_experiment_is_active` / `_get_trace_artifact_location_tag`,
  its table models, rollups and promoted metadata keys), and `SqlAlchemyStore._engine_map` (a store set aside);
  the quality-criteria run tag (`mlflow.genai.evaluation.quality_criteria`: its parser and builder,
  ragexp.store.quality_criteria writes what they make) and the experimental
  `mlflow.genai.compare_evaluations` (3.18), which reads two ragexp runs' traces paired on their
  evaluation request id (ragexp.store.trace_store).
- Hydra's `Callback.on_job_start(config, task_function=...)` (the sweep hands its jobs their logging
  helper there: ragexp.run.app.Jobs), the basic launcher's `_target_`, `JobReturn._return_value`.
- OmegaConf: `DictConfig._get_node(key)._value()` (an interpolation's text: ragexp.config.validation).
- Python: `threading._shutdown` and `atexit._run_exitfuncs` (ragexp.__main__.command's quick end),
  argparse's `_option_string_actions` (ragexp.config.cli_settings).
- httpx / httpcore (and the openai client's httpx2 / httpcore2): `Client._transport`, `Client._mounts`,
  a transport's `_pool` and its `_network_backend` (ragexp.base.http_deadline).
Each one's reason and measured gain: docs/contributing/private-hooks.md."""
import inspect
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest

from conftest import ROOT, cli_env, compose


def version_tested(package: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    return "?"


def contract(package: str, api: str, holds: bool, detail: str = "") -> None:
    installed = sys.version.split()[0] if package == "python" else metadata.version(package)
    tested = "3.11 (pyproject's requires-python, CI)" if package == "python" else f"{version_tested(package)} (constraints.txt)"
    assert holds, f"{api} changed: {package} {installed} is installed, ragexp was tested with {tested}; {detail}".rstrip("; ")


def parameters(function) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p != "self"]



def test_hydras_basic_sweeper_splits_a_grid_as_ragexp_expects():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    except ImportError as err:
        contract("hydra-core", "hydra._internal.core_plugins.basic_sweeper", False, str(err))
    contract("hydra-core", "BasicSweeper.split_arguments(overrides, max_batch_size)",
             parameters(BasicSweeper.split_arguments) == ["overrides", "max_batch_size"],
             f"signature {parameters(BasicSweeper.split_arguments)}")
    overrides = OverridesParser.create().parse_overrides(["a=1,2", "b=x,y", "c=3"])
    batches = BasicSweeper.split_arguments(overrides, None)
    contract("hydra-core", "BasicSweeper.split_arguments", batches == [[
        ["a=1", "b=x", "c=3"], ["a=1", "b=y", "c=3"], ["a=2", "b=x", "c=3"], ["a=2", "b=y", "c=3"]]],
        f"it returned {batches}")


def with_hydras_node():
    """The packaged config with Hydra's own node (its sweeper, its launcher), as the command composes it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", return_hydra_config=True)


def test_the_default_sweeper_is_the_one_ragexp_checks_grids_for():
    from ragexp.sweep.callbacks import BASIC_SWEEPER

    cfg = with_hydras_node()
    contract("hydra-core", "the basic sweeper's _target_", cfg.hydra.sweeper._target_ == BASIC_SWEEPER,
             f"it is {cfg.hydra.sweeper._target_}")


def test_hydras_config_loader_composes_a_sweep_point():
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    contract("hydra-core", "ConfigLoader.load_sweep_config(master_config, sweep_overrides)",
             parameters(ConfigLoaderImpl.load_sweep_config) == ["master_config", "sweep_overrides"],
             f"signature {parameters(ConfigLoaderImpl.load_sweep_config)}")
    assert compose("chunker=fixed").chunker._target_.endswith("FixedChunker")  # (compose itself still works)


def test_hydras_composition_builds_a_defaults_list_then_composes_from_it():
    """ragexp.sweep.composed shares both steps between points that choose the same options."""
    import dataclasses

    from hydra._internal import config_loader_impl
    from hydra._internal.defaults_list import DefaultsList

    contract("hydra-core", "config_loader_impl.create_defaults_list(repo, config_name, overrides_list, prepend_hydra, "
             "skip_missing)", parameters(config_loader_impl.create_defaults_list) == [
                 "repo", "config_name", "overrides_list", "prepend_hydra", "skip_missing"],
             f"signature {parameters(config_loader_impl.create_defaults_list)}")
    contract("hydra-core", "ConfigLoaderImpl._compose_config_from_defaults_list(defaults, repo)",
             parameters(config_loader_impl.ConfigLoaderImpl._compose_config_from_defaults_list) == ["defaults", "repo"],
             f"signature {parameters(config_loader_impl.ConfigLoaderImpl._compose_config_from_defaults_list)}")
    fields = [f.name for f in dataclasses.fields(DefaultsList)]
    contract("hydra-core", "DefaultsList's fields", {"defaults", "config_overrides"} <= set(fields), f"fields {fields}")


def test_mlflows_tracing_client_takes_traces_and_spans_as_ragexp_sends_them():
    try:
        from mlflow.tracing.client import TracingClient
    except ImportError as err:
        contract("mlflow", "mlflow.tracing.client.TracingClient", False, str(err))
    contract("mlflow", "TracingClient.start_trace(trace_info)", parameters(TracingClient.start_trace)[:1] == ["trace_info"],
             f"signature {parameters(TracingClient.start_trace)}")
    contract("mlflow", "TracingClient.log_spans(location, spans)", len(parameters(TracingClient.log_spans)) >= 2,
             f"signature {parameters(TracingClient.log_spans)}")
    import mlflow

    contract("mlflow", "MlflowClient.link_traces_to_run(trace_ids, run_id)",
             parameters(mlflow.MlflowClient.link_traces_to_run)[:2] == ["trace_ids", "run_id"],
             f"signature {parameters(mlflow.MlflowClient.link_traces_to_run)}")


def test_mlflows_span_and_trace_records_read_what_ragexp_writes():
    from mlflow.entities import TraceState
    from mlflow.tracing.constant import SpanAttributeKey, TraceMetadataKey

    from ragexp.store.trace_store import trace_of

    for key in ("SOURCE_RUN", "TOKEN_USAGE", "COST"):
        contract("mlflow", f"TraceMetadataKey.{key}", hasattr(TraceMetadataKey, key))
    for key in ("REQUEST_ID", "SPAN_TYPE", "INPUTS", "OUTPUTS"):
        contract("mlflow", f"SpanAttributeKey.{key}", hasattr(SpanAttributeKey, key))
    record = {"question_id": "q1", "question": "Which port?", "start_ns": 1_000_000_000, "end_ns": 2_000_000_000,
              "spans": [{"id": 1, "name": "generate", "type": "LLM", "parent": None, "start_ns": 1_100_000_000,
                         "end_ns": 1_900_000_000, "inputs": {"q": "Which port?"}, "outputs": "7400", "error": "",
                         "attributes": {"mlflow.chat.tokenUsage": {"input_tokens": 3, "output_tokens": 1,
                                                                   "total_tokens": 4}}}]}
    try:
        info, spans = trace_of(record, {"answer": "7400", "status": "judged", "judge_scores": {"faithfulness": 9}},
                               "0", "0123456789abcdef0123456789abcdef")
    except Exception as err:  # noqa: BLE001 - any error here is the contract breaking
        contract("mlflow", "TraceInfo(...) / Span.from_dict(...)", False, f"{type(err).__name__}: {err}")
    contract("mlflow", "Span.from_dict", [s.name for s in spans] == ["question", "generate"]
             and spans[1].parent_id == spans[0].span_id and spans[0].trace_id == info.trace_id,
             f"spans {[(s.name, s.parent_id, s.trace_id) for s in spans]}")
    contract("mlflow", "TraceInfo", info.state == TraceState.OK and info.execution_duration == 1000
             and [a.name for a in info.assessments] == ["faithfulness"], f"info {info}")


def test_hydra_shows_a_callback_the_task_function_as_a_job_starts():
    """The route from a sweep to its jobs in this process (ragexp.run.app.Jobs): Hydra calls the task
    function with a config only, and passes it to `Callback.on_job_start`, where the sweep hands it
    its logging helper; the task function is an object, which `hydra.main` takes as a function."""
    from hydra.core.utils import run_job
    from hydra.experimental.callback import Callback

    contract("hydra-core", "Callback.on_job_start(config, *, task_function, **kwargs)",
             "task_function" in inspect.signature(Callback.on_job_start).parameters,
             f"signature {inspect.signature(Callback.on_job_start)}")
    source = inspect.getsource(run_job)
    contract("hydra-core", "run_job: callbacks.on_job_start(config=..., task_function=task_function)",
             "on_job_start(config=config, task_function=task_function)" in source, "run_job no longer passes it")


def test_the_basic_launcher_is_the_one_ragexp_keeps_compositions_for():
    from ragexp.sweep.composed import BASIC_LAUNCHER

    cfg = with_hydras_node()
    contract("hydra-core", "the basic launcher's _target_", cfg.hydra.launcher._target_ == BASIC_LAUNCHER,
             f"it is {cfg.hydra.launcher._target_}")


def test_a_failed_jobs_error_is_its_job_returns_private_value():
    """The racing sweeper reads a failed job's error from `JobReturn._return_value`: the public
    `return_value` raises it, after writing "Error executing job" to stderr, for every failed job."""
    from hydra.core.utils import JobReturn, JobStatus

    failed = JobReturn(overrides=["a=1"], status=JobStatus.FAILED, _return_value=ValueError("bad point"))
    with pytest.raises(ValueError, match="bad point") as raised:
        failed.return_value  # noqa: B018 - what the private field is the public accessor's
    contract("hydra-core", "JobReturn._return_value", raised.value is failed._return_value)


QUICK_END = textwrap.dedent("""
    import atexit, threading
    from concurrent.futures import ThreadPoolExecutor
    import ragexp.__main__ as entry

    def main():
        pool = ThreadPoolExecutor(1)
        pool.submit(int)  # an idle worker left, as a judge's thread pool leaves one
        go = threading.Event()
        threading.Thread(target=lambda: (go.wait(), print("thread", flush=True))).start()
        atexit.register(print, "exit handler")
        go.set()
        raise SystemExit(3)

    entry.main = main
    entry.command()
""")


def test_the_commands_quick_end_joins_threads_and_runs_exit_handlers_as_python_does():
    """ragexp.__main__.command ends with what Python's own end does first (`threading._shutdown`:
    thread pools told to stop, non-daemon threads joined; `atexit._run_exitfuncs`), then
    `os._exit` instead of the interpreter's teardown of every module."""
    import atexit
    import threading

    contract("python", "threading._shutdown()", callable(getattr(threading, "_shutdown", None)))
    contract("python", "atexit._run_exitfuncs()", callable(getattr(atexit, "_run_exitfuncs", None)))
    proc = subprocess.run([sys.executable, "-c", QUICK_END], env=cli_env(), capture_output=True, text=True, timeout=120)
    contract("python", "threading._shutdown() then atexit._run_exitfuncs()",
             proc.returncode == 3 and proc.stdout == "thread\nexit handler\n",
             f"exit {proc.returncode}, output {proc.stdout!r} {proc.stderr[-500:]}")


def test_omegaconf_gives_an_interpolations_text_unresolved():
    """ragexp.config.validation reports a bad value where it is written: `${budget_usd}` names the key."""
    from omegaconf import OmegaConf

    node = OmegaConf.create({"budget_usd": 5, "llm": {"budget": "${budget_usd}"}}).llm
    text = node._get_node("budget")._value()
    contract("omegaconf", "DictConfig._get_node(key)._value()", text == "${budget_usd}", f"it gave {text!r}")


def test_argparse_lists_a_parsers_flags():
    import argparse

    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--tracking-uri")
    flags = getattr(parser, "_option_string_actions", None)
    contract("python", "argparse.ArgumentParser._option_string_actions",
             isinstance(flags, dict) and {"--tracking-uri", "--help", "-h"} <= set(flags), f"it is {flags!r}")


@pytest.mark.parametrize("client", ["httpx", "openai"])
def test_http_clients_make_their_connections_through_a_backend_ragexp_can_bound(client):
    """ragexp.base.http_deadline reaches each transport's connection pool to make its connections
    through `Bounded` (a deadline for the whole attempt, a cap on the reply's size)."""
    from ragexp.base.http_deadline import Bounded, bounded

    if client == "openai":
        from openai import DefaultHttpxClient

        made, package = DefaultHttpxClient(), "openai"
    else:
        import httpx

        made, package = httpx.Client(trust_env=False), "httpx"
    transports = [getattr(made, "_transport", None), *(getattr(made, "_mounts", None) or {}).values()]
    contract(package, "Client._transport / Client._mounts", transports[0] is not None and isinstance(made._mounts, dict))
    backends = [getattr(getattr(t, "_pool", None), "_network_backend", None) for t in transports]
    contract(package, "transport._pool._network_backend", all(b is not None for b in backends), f"backends {backends}")
    bounded(made)
    contract(package, "transport._pool._network_backend (set)",
             all(isinstance(t._pool._network_backend, Bounded) for t in transports))
    made.close()


def test_mlflows_sql_store_writes_a_trace_as_ragexp_writes_many_in_one_transaction():
    """ragexp.store.trace_store writes the rows `SqlAlchemyStore.start_trace` writes, for all of a run's
    traces in one session (tests/test_tracing.py checks the traces read back are start_trace's)."""
    try:
        from mlflow.store.tracking.dbmodels.models import SqlAssessments, SqlTraceInfo, SqlTraceMetadata, SqlTraceTag
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.store.tracking.utils.sql_trace_rollups import RollupFamily, enqueue_rollup_rebuild_partitions
        from mlflow.store.tracking.utils.trace_analytics import (PROMOTED_TRACE_METADATA_KEYS,
                                                                 analytics_columns_from_metadata)
        from mlflow.tracking._tracking_service.utils import _get_store
    except ImportError as err:
        contract("mlflow", "the SQL store's trace tables and helpers", False, str(err))
    contract("mlflow", "mlflow.tracking._tracking_service.utils._get_store()", parameters(_get_store)[:1] in ([], ["store_uri"]),
             f"signature {parameters(_get_store)}")
    contract("mlflow", "SqlAlchemyStore._check_experiment_is_active(experiment)",
             parameters(SqlAlchemyStore._check_experiment_is_active)[:1] == ["experiment"],
             f"signature {parameters(SqlAlchemyStore._check_experiment_is_active)}")
    contract("mlflow", "SqlAlchemyStore._get_trace_artifact_location_tag(experiment, trace_id)",
             parameters(SqlAlchemyStore._get_trace_artifact_location_tag)[:2] == ["experiment", "trace_id"],
             f"signature {parameters(SqlAlchemyStore._get_trace_artifact_location_tag)}")
    contract("mlflow", "SqlAssessments.from_mlflow_entity", callable(getattr(SqlAssessments, "from_mlflow_entity", None)))
    contract("mlflow", "the trace tables' columns", {"request_id", "experiment_id", "timestamp_ms"} <= set(
        SqlTraceInfo.__table__.columns.keys()) and {"request_id", "key", "value"} <= set(SqlTraceTag.__table__.columns.keys())
        and {"request_id", "key", "value"} <= set(SqlTraceMetadata.__table__.columns.keys()))
    contract("mlflow", "RollupFamily.TRACE_METRIC / ASSESSMENT", hasattr(RollupFamily, "TRACE_METRIC")
             and hasattr(RollupFamily, "ASSESSMENT"))
    contract("mlflow", "enqueue_rollup_rebuild_partitions(session, partitions)",
             len(parameters(enqueue_rollup_rebuild_partitions)) >= 2, f"signature {parameters(enqueue_rollup_rebuild_partitions)}")
    contract("mlflow", "PROMOTED_TRACE_METADATA_KEYS, analytics_columns_from_metadata(metadata)",
             callable(analytics_columns_from_metadata) and len(PROMOTED_TRACE_METADATA_KEYS) > 0)


def test_mlflows_sql_store_keeps_one_engine_per_uri_that_ragexp_can_drop():
    """ragexp.store.sqlite_store drops the engine MLflow keeps for a store it set aside (half-made)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    contract("mlflow", "SqlAlchemyStore._engine_map (dict) and _engine_map_lock",
             isinstance(getattr(SqlAlchemyStore, "_engine_map", None), dict)
             and hasattr(getattr(SqlAlchemyStore, "_engine_map_lock", None), "acquire"))


@pytest.mark.parametrize("package,private_api", [("mlflow", "mlflow.tracing.client"),
                                                 ("hydra-core", "hydra._internal")])
def test_the_range_allowed_is_the_range_tested(package, private_api):
    """pyproject's range for a package whose private API ragexp uses stops before the next minor
    release: what these contracts were run against."""
    import re
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if re.match(rf"{package}\b", d)]
    major, minor = version_tested(package).split(".")[:2]
    assert f"<{major}.{int(minor) + 1}" in spec.replace(" ", ""), (
        f"{package}: pyproject allows {spec!r}, but {private_api} was tested with {version_tested(package)} only; cap the range "
        f"below the next minor release")


def test_mlflows_quality_criteria_parser_and_builder_make_the_tag_ragexp_writes():
    """ragexp writes a gated run's rules (ragexp.store.quality_criteria) as the tag
    `mlflow.genaiEvaluate.qualityCriteria`: MLflow's parser reads ragexp's conditions back into the
    same rules, and MLflow's builder makes of them the tag ragexp wrote (but for its random revision)."""
    import json

    from conftest import needs_mlflow_318
    from ragexp.store.quality_criteria import NOT_MAPPED, QUALITY_CRITERIA, Criteria, Rule, gate_criteria

    needs_mlflow_318()
    try:
        from mlflow.genai.evaluation.quality_criteria import build_quality_criteria_tag, parse_quality_criteria
        from mlflow.genai.scorers import scorer
        from mlflow.utils.mlflow_tags import MLFLOW_GENAI_EVALUATE_QUALITY_CRITERIA
    except ImportError as err:
        contract("mlflow", "mlflow.genai.evaluation.quality_criteria", False, str(err))
    contract("mlflow", "mlflow_tags.MLFLOW_GENAI_EVALUATE_QUALITY_CRITERIA",
             MLFLOW_GENAI_EVALUATE_QUALITY_CRITERIA == QUALITY_CRITERIA, f"it is {MLFLOW_GENAI_EVALUATE_QUALITY_CRITERIA!r}")
    gate = {"thresholds": {"faithfulness": {"min": 0.9, "scale": [0, 1]}, "hallucination_rate": {"max": 0.1},
                           "mrr": {"min": 0.8}, "overall_score": {"min": 0.5}, "answer_f1": {"min": 0.25}},
            "baseline": "runs/earlier", "margin": 0.5, "alpha": 0.05}
    aggregates = [{"name": "avg_faithfulness", "inputs": ["faithfulness"], "kind": "mean"},
                  {"name": "hallucination_rate", "inputs": ["hallucination"], "kind": "mean"},
                  {"name": "mrr", "inputs": ["mrr"], "kind": "mean", "rows": "valued"},
                  {"name": "avg_answer_f1", "inputs": ["answer_f1"], "kind": "mean", "rows": "valued"},
                  {"name": "overall_score", "inputs": ["faithfulness", "hallucination"], "kind": "overall"}]
    values = {"avg_faithfulness": 8.2, "hallucination_rate": 0.25, "mrr": 0.7, "avg_answer_f1": 0.4, "overall_score": 0.6}
    criteria = gate_criteria(gate, aggregates, values, {"avg_faithfulness": [1, 10]},
                             {"faithfulness", "hallucination", "answer_f1"})
    criteria = Criteria((*criteria.rules, Rule("answer_f1_p", "<=", 2.0, "p90")), criteria.not_mapped)
    assert [r.metric_key for r in criteria.rules] == ["faithfulness/mean", "hallucination/mean", "answer_f1/mean",
                                                      "answer_f1_p/p90"]
    scorers = [scorer(lambda outputs: 1.0, name=name) for name in ("faithfulness", "hallucination", "answer_f1", "answer_f1_p")]
    try:
        rules = parse_quality_criteria(scorers, criteria.expression())
        built = build_quality_criteria_tag(rules)
    except Exception as err:  # noqa: BLE001 - any error here is the contract breaking
        contract("mlflow", "parse_quality_criteria(scorers, text) / build_quality_criteria_tag(rules)", False,
                 f"{type(err).__name__}: {err} (on {criteria.expression()!r})")
    contract("mlflow", "parse_quality_criteria", [(r.scorer_name, r.aggregation, r.comparator, r.threshold) for r in rules]
             == [(r.scorer, r.aggregation, r.comparator, r.threshold) for r in criteria.rules], f"rules {rules}")
    written = json.loads(criteria.tags("ragexp-revision")[QUALITY_CRITERIA])
    made = json.loads(built)
    contract("mlflow", "build_quality_criteria_tag", {**made, "revision": "ragexp-revision"} == written,
             f"MLflow makes {built}, ragexp writes {written}")
    assert written["rules"][0] == {"metricKey": "faithfulness/mean", "comparator": "GTE", "threshold": 9.1}
    not_mapped = criteria.tags("r")[NOT_MAPPED]  # what the rules cannot say is said beside them
    for part in ("faithfulness >= 0.9 on [0, 1]: the rule says 9.1", "mrr: mrr is not the mean of a score",
                 "overall_score: overall_score is not", "regression against runs/earlier", "Holm", "margin 0.5"):
        assert part in not_mapped, not_mapped


def test_mlflows_compare_evaluations_is_the_experimental_api_ragexp_documents():
    import dataclasses

    import mlflow
    from conftest import needs_mlflow_318

    needs_mlflow_318()

    compare = getattr(mlflow.genai, "compare_evaluations", None)
    contract("mlflow", "mlflow.genai.compare_evaluations", compare is not None, "not found")
    # still experimental: ragexp's docs say so; a stable release of it is a reason to read it again
    contract("mlflow", "compare_evaluations is experimental", "Experimental" in (compare.__doc__ or ""))
    contract("mlflow", "compare_evaluations(candidate_run_id, baseline_run_id, greater_is_better, confidence_level, "
             "log_results)", parameters(compare) == ["candidate_run_id", "baseline_run_id", "greater_is_better",
                                                     "confidence_level", "log_results"], f"signature {parameters(compare)}")
    from mlflow.genai.evaluation.comparison import ComparisonResult, ScorerComparison
    from mlflow.tracing.constant import TraceTagKey

    fields = {f.name for f in dataclasses.fields(ScorerComparison)}
    contract("mlflow", "ScorerComparison's fields", {"n_paired", "method", "diff", "ci_low", "ci_high", "p_value"} <= fields,
             f"fields {sorted(fields)}")
    fields = {f.name for f in dataclasses.fields(ComparisonResult)}
    contract("mlflow", "ComparisonResult's fields", {"scorers", "paired_rows", "unpaired_baseline_trace_ids"} <= fields,
             f"fields {sorted(fields)}")
    contract("mlflow", "TraceTagKey.EVAL_REQUEST_ID", TraceTagKey.EVAL_REQUEST_ID == "mlflow.eval.requestId")
