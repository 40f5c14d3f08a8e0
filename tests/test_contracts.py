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
  fact), `Span.from_dict` and the metadata / attribute keys it writes."""
import inspect
from importlib import metadata

import pytest

from conftest import ROOT, compose


def version_tested(package: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    return "?"


def contract(package: str, api: str, holds: bool, detail: str = "") -> None:
    assert holds, (f"{api} changed: {package} {metadata.version(package)} is installed, ragexp was tested with "
                   f"{version_tested(package)} (constraints.txt); {detail}".rstrip("; "))


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


def test_the_default_sweeper_is_the_one_ragexp_checks_grids_for():
    from ragexp.sweep.callbacks import BASIC_SWEEPER

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose(config_name="config", return_hydra_config=True)
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
