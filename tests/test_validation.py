"""One validation pass before any work (ragexp.validation): every setting of a composed config,
every problem at once, one line each naming the full key; a grid is checked point by point."""
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from conftest import CONF, ENGINE_OPTIONS, ROOT, compose, engine_option, require_engine, run_cli
from ragexp.errors import RagexpError
from ragexp.validation import problems, validate

BAD_CONFIGS = [
    (["chunker.chunk_size=abc"], "chunker.chunk_size: 'abc' is not an integer"),
    (["retriever.top_k=2.5"], "retriever.top_k: 2.5 is not a whole number"),
    (["judge=llm", "judge.endpoint.max_concurrency=0"], "judge.endpoint.max_concurrency: must be >= 1, got 0"),
    (["chunker.chunk_overlap=512"], "chunker.chunk_overlap: must be less than chunk_size (512), got 512"),
    (["weights.faithfulness=0.5"], "weights: context_relevance=0.3 + answer_similarity=0.4 + faithfulness=0.5 = 1.2; "
                                   "the weights must sum to 1 (set weights.<metric>=...)"),
    (["+chunker.chunk_sise=5"], "chunker.chunk_sise: unknown setting; RecursiveChunker takes chunk_size, chunk_overlap"),
    (["dataset.on_error=ignore"], "dataset.on_error: 'ignore' is not one of 'stop', 'skip'"),
    (["budget_usd=-1"], "budget_usd: must be >= 0, got -1"),  # reported where it is written, not at llm.budget_usd
    (["dry_run=maybe"], "dry_run: 'maybe' is not true or false"),
    (["generator=openai", "generator.temperature=3"], "generator.temperature: must be <= 2, got 3"),
    (["retriever=hybrid", "retriever.retrievers.bm25.b=1.5"], "retriever.retrievers.bm25.b: must be <= 1, got 1.5"),
    (["llm.prices.gpt-4o.input=free"], "llm.prices.gpt-4o.input: 'free' is not a number"),
    (["chunker=semantic", "chunker.breakpoint_percentile=100"], "chunker.breakpoint_percentile: must be < 100, got 100"),
    (["dataset=hotpotqa", "~dataset.path"], "dataset.path: missing; HotpotQADataset needs it (set +dataset.path=...)"),
    (["dataset.limit=???"], "dataset.limit: no value given; set dataset.limit=..."),
    (["judge=llm", "judge.endpoint.base_url=localhost:8000"],
     "judge.endpoint.base_url: must be an http(s) URL such as http://127.0.0.1:8000/v1, got 'localhost:8000'"),
    (["judge=llm", "judge.user_prompt='Answer: {answer}'"],
     "judge.user_prompt: unknown field {answer}; the fields are {question}, {context}, {expected}, {generated} "
     "(write literal braces as {{ and }})"),
    (["metrics.retrieval=[mrr,bleu@4]"], "metrics.retrieval: 'bleu@4' is not a retrieval metric; use hit_rate, mrr, "
                                         "ndcg, recall, precision, map with an optional cutoff, e.g. ndcg@10"),
    (["judge=llm", "judge.endpoint._target_=ragexp.components.chunkers.FixedChunker"],
     "judge.endpoint._target_: ragexp.components.chunkers.FixedChunker is not a subclass of Endpoint"),
    (["gate=production", "gate.thresholds.mrr.min=high"], "gate.thresholds.mrr.min: 'high' is not a number"),
    (["gate=production", "gate.thresholds.faithfulness.scale=[1,0]"],
     "gate.thresholds.faithfulness.scale: lowest must be below highest, got [1, 0]"),
    (["chunker._target_=ragexp.components.chunkers.Nope"],
     "chunker._target_: cannot import 'ragexp.components.chunkers.Nope' (AttributeError: module 'ragexp.components.chunkers' has no attribute 'Nope')"),
]


@pytest.mark.parametrize("overrides,message", BAD_CONFIGS, ids=[" ".join(o) for o, _ in BAD_CONFIGS])
def test_a_bad_setting_gives_one_line_naming_its_full_key(overrides, message):
    assert problems(compose(*overrides)) == [message]


@pytest.mark.parametrize("override,message", [
    ("max_failed_share=2", "max_failed_share: must be <= 1, got 2"),
    ("verbose=maybe", "verbose: 'maybe' is not true or false"),
    ("objective=", "objective: must not be empty"),
    ("~slices", "slices: missing; RunSettings needs it (set +slices=...)"),
])
def test_the_runs_own_top_level_settings_are_checked_with_the_components(override, message):
    """run_name, objective, slices, max_failed_share, ... (ragexp.run.settings.RunSettings): their
    defaults are in conf/config.yaml only, so one deleted or mistyped is refused, not defaulted."""
    from ragexp.run.settings import RunSettings

    assert problems(compose(override), RunSettings) == [message]
    assert problems(compose(), RunSettings) == []


@pytest.mark.parametrize("config,override,message", [
    ("monitor", "monitor.source=kafka", "monitor.source: 'kafka' is not one of 'file', 'mlflow', 'otlp'"),
    ("monitor", "monitor.judge_sample=-1", "monitor.judge_sample: must be >= 0, got -1"),
    ("synth", "synth.size=0", "synth.size: must be >= 1, got 0"),
    ("synth", "synth.quality.min_overlap=2", "synth.quality.min_overlap: must be <= 1, got 2"),
    ("synth", "+synth.mix.opinion=1", "synth.mix: unknown question type opinion; the types are factual, procedural, "
     "comparative, troubleshooting, multi_hop"),
])
def test_the_settings_of_monitor_and_synth_are_checked_like_a_components(config, override, message):
    from ragexp.config.compose import compose as compose_config

    given = {"monitor": "monitor.input=log.jsonl", "synth": "synth.out=dataset"}[config]  # set by the app's Hydra run
    cfg, _ = compose_config([override, given], config_name=config)
    assert problems(cfg) == [message]


def test_a_shared_component_is_reported_once_where_it_is_written():
    # the embedder is referenced by the retriever (${embedder}); its problem is one line, at `embedder`
    assert problems(compose("embedder.batch_size=0")) == ["embedder.batch_size: must be >= 1, got 0"]


def test_every_problem_of_a_config_is_reported_at_once():
    cfg = compose("chunker.chunk_size=abc", "retriever.top_k=2.5", "judge=llm", "judge.endpoint.max_concurrency=0",
                  "judge.repeats=0", "weights.faithfulness=0.5", "+retriever.depth=3")
    with pytest.raises(RagexpError) as err:
        validate(cfg)
    assert str(err.value).splitlines() == [
        "6 problems in the config:",
        "  chunker.chunk_size: 'abc' is not an integer",
        "  retriever.top_k: 2.5 is not a whole number",
        "  retriever.depth: unknown setting; DenseRetriever takes embedder, top_k, url, api_key_env, collection, path, batch_size",
        # in the config's order: `weights` comes before `judge` (a judge option may choose its weights)
        "  weights: context_relevance=0.3 + answer_similarity=0.4 + faithfulness=0.5 = 1.2; "
        "the weights must sum to 1 (set weights.<metric>=...)",
        "  judge.endpoint.max_concurrency: must be >= 1, got 0",
        "  judge.repeats: must be >= 1, got 0",
    ]


def config_options() -> list[str]:
    """`group=option` for every YAML under conf/ (`+group=option` for groups not in the defaults list)."""
    defaults = [*OmegaConf.load(CONF / "config.yaml").defaults, *OmegaConf.load(CONF / "system" / "pipeline.yaml").defaults]
    chosen = {next(iter(d)).split("@")[0].lstrip("/") for d in defaults if not isinstance(d, str)}
    return [f"{'' if group.name in chosen else '+'}{group.name}={option.stem}"
            for group in sorted(p for p in CONF.iterdir() if p.is_dir()) for option in sorted(group.glob("*.yaml"))]


# options with a setting only the user can give: the config check asks for it, and for nothing else
REQUIRED = {"system=python": ["system.function: not set; set system.function=module:function (such as mypackage.rag:answer)"],
            "system=http": ["system.url: not set; set system.url=http://host:port/path (your service's endpoint)"],
            "dataset=mlflow": ["dataset.name: not set; set dataset.name=NAME, the MLflow evaluation dataset to read"]}


def missing_data(cfg) -> list[str]:
    """The config check's line for a dataset option whose default data is not there: hotpotqa and
    autorag_msmarco read ../shared/data beside the checkout, which a user's clone has not."""
    from omegaconf import OmegaConf

    path = OmegaConf.select(cfg, "dataset.path", default=None)
    if not path or Path(path).expanduser().exists():
        return []
    return [f"dataset.path: {path} does not exist (looked for {Path(path).expanduser().resolve()}); "
            "set dataset.path=/path/to/it"]


@pytest.mark.parametrize("option", [engine_option(o) for o in config_options()])
def test_every_shipped_option_validates_clean(option):
    if option in ENGINE_OPTIONS:  # a Hydra plugin from an optional extra (ray, optuna): the engines tier
        require_engine(ENGINE_OPTIONS[option])
    cfg = compose(option)
    assert problems(cfg) == REQUIRED.get(option, []) + missing_data(cfg)


def test_validation_imports_no_model_code():
    code = ("import sys; sys.path.insert(0, 'tests'); from conftest import compose; from ragexp.validation import problems; "
            "assert problems(compose('judge=triad', 'generator=openai', 'retriever=hybrid', 'chunker=semantic')) == []; "
            "print([m for m in ('torch', 'sentence_transformers', 'mlflow', 'openai', 'qdrant_client') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.fixture
def sweep_config():
    """`sweep_config(*task)`: the multirun's master config as the SweepTracking callback gets it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def make(*task: str):
        cfg = hydra_compose(config_name="config", return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.overrides.task = list(task)
        return cfg

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield make


def test_every_grid_point_is_composed_and_checked(sweep_config):
    from ragexp.sweep.folder import grid_points, invalid_points

    cfg = sweep_config("retriever=bm25", "chunker=recursive,semantic", "chunker.chunk_size=64,256", "dataset.limit=2")
    assert len(grid_points(cfg)) == 4
    assert invalid_points(cfg) == [
        "job 0 (chunker=recursive chunker.chunk_size=64):\n"
        "    chunker.chunk_overlap: must be less than chunk_size (64), got 64",
        "job 2 (chunker=semantic chunker.chunk_size=64):\n"
        "    Could not override 'chunker.chunk_size'. To append to your config use +chunker.chunk_size=64",
        "job 3 (chunker=semantic chunker.chunk_size=256):\n"
        "    Could not override 'chunker.chunk_size'. To append to your config use +chunker.chunk_size=256",
    ]
    assert invalid_points(sweep_config("retriever=bm25", "chunker.chunk_size=128,256")) == []


def test_a_missing_data_file_is_a_bad_grid_point_like_a_misspelt_setting(sweep_config, tmp_path):
    """docs/get-started/own-system.md's sweep over a questions file that did not exist started 6 jobs that each
    failed (exit 4, a FAILED parent and 6 FAILED children): it is refused before any job now."""
    from ragexp.sweep.folder import invalid_points

    missing = tmp_path / "questions.jsonl"
    cfg = sweep_config("dataset=outputs", f"dataset.path={missing}", "judge=offline,offline_learned")
    found = invalid_points(cfg)
    assert len(found) == 2 and all(f"dataset.path: {missing} does not exist" in point for point in found)
    missing.write_text('{"question": "Which port?", "answer": "7070", "contexts": ["port 7070"]}\n')
    assert invalid_points(cfg) == []


def test_a_sweep_with_one_bad_grid_point_runs_nothing(tmp_path):
    sweep_dir, store = tmp_path / "multirun", tmp_path / "mlflow.db"
    proc = run_cli("-m", "retriever=bm25", "chunker.chunk_size=64,256", "dataset.limit=2", f"hydra.sweep.dir={sweep_dir}",
                   f"tracker.tracking_uri=sqlite:///{store}", f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path,
                   env={"PYTHONPATH": str(ROOT)})  # this checkout's ragexp, wherever the package is installed from
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-3:] == [
        "ragexp: error: 1 of 2 grid points are invalid; no job was started:",
        "  job 0 (chunker.chunk_size=64):",
        "    chunker.chunk_overlap: must be less than chunk_size (64), got 64",
    ]
    assert "Launching" not in proc.stdout + proc.stderr
    assert not sweep_dir.exists() and not store.exists()  # no job folder, no parent run


def test_a_bad_point_last_in_a_grid_is_refused_before_any_job_and_any_store(tmp_path):
    """The grid's points are each composed and fully validated before job 0, the last as the first:
    a chunk_size the chunk_overlap does not fit (a check of the composed chunker, not of a key or an
    option) at the end of the grid stops the sweep with the same message, before any job folder,
    and before its logging helper has opened or made a store."""
    from conftest import HASH, run_app
    from ragexp.base import children
    from ragexp.store import log_ahead

    sweep_dir, store = tmp_path / "multirun", tmp_path / "mlflow.db"
    proc = run_app("-m", *HASH, "retriever=bm25", "chunker.chunk_size=512,256,64", "dataset.limit=2",
                   f"hydra.sweep.dir={sweep_dir}", f"tracker.tracking_uri=sqlite:///{store}",
                   f"cache.dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-3:] == [
        "ragexp: error: 1 of 3 grid points are invalid; no job was started:",
        "  job 2 (chunker.chunk_size=64):",
        "    chunker.chunk_overlap: must be less than chunk_size (64), got 64",
    ]
    assert not sweep_dir.exists() and not store.exists()
    assert not [c for c in children.running() if c.name == log_ahead.NAME]  # the sweep's helper stopped


USER_COMPONENTS = '''
from __future__ import annotations

from typing import TYPE_CHECKING

from ragexp.components.chunkers import RecursiveChunker
from ragexp.validation import PositiveInt

if TYPE_CHECKING:
    from somewhere_else import Tokenizer


class Scorer:
    def __init__(self, weight: float = 1.0):
        self.weight = weight


class OtherThing:
    pass


class ScoredChunker(RecursiveChunker):
    def __init__(self, chunk_size: PositiveInt, chunk_overlap: int, scorer: Scorer, tokenizer: Tokenizer | None = None):
        super().__init__(chunk_size, chunk_overlap)
        self.scorer, self.tokenizer = scorer, tokenizer
'''


def test_a_users_components_are_checked_as_strictly_as_ragexps(tmp_path, monkeypatch, caplog):
    """A user's component nested in a user's component: its class is checked against the
    annotation (as ragexp's own are), its settings typed; a setting whose annotation cannot be
    evaluated is reported as not checked (a warning naming it), not skipped in silence."""
    import logging

    from ragexp.validation import unchecked, validate

    (tmp_path / "user_parts.py").write_text(USER_COMPONENTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    base = ["chunker._target_=user_parts.ScoredChunker", "+chunker.scorer._target_=user_parts.Scorer"]
    assert problems(compose(*base)) == []
    assert problems(compose(*base, "+chunker.scorer.weight=heavy")) == ["chunker.scorer.weight: 'heavy' is not a number"]
    assert problems(compose("chunker._target_=user_parts.ScoredChunker", "+chunker.scorer._target_=user_parts.OtherThing")) \
        == ["chunker.scorer._target_: user_parts.OtherThing is not a subclass of Scorer"]
    assert problems(compose("chunker._target_=user_parts.ScoredChunker", "+chunker.scorer=5")) == [
        "chunker.scorer: expected a Scorer config with a _target_, got 5"]
    cfg = compose(*base, "+chunker.tokenizer=bert")
    [line] = unchecked(cfg)
    assert line.startswith("chunker.tokenizer: not checked: its annotation 'Tokenizer | None' cannot be evaluated (NameError")
    with caplog.at_level(logging.WARNING, logger="ragexp"):
        validate(cfg)  # a warning, not an error: the run goes on
    assert [r.getMessage() for r in caplog.records if "not checked" in r.getMessage()] == [line]


def test_each_grid_point_is_composed_once_for_the_checks_and_its_job(tmp_path, monkeypatch):
    """ragexp's check of every point, Hydra's and the launcher's each composed every point: three
    compositions a job. Now one, and the job runs the config the checks saw."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from conftest import HASH, run_app

    composed: list[tuple[str, ...]] = []
    real = ConfigLoaderImpl.load_sweep_config

    def counted(self, master_config, sweep_overrides):
        composed.append(tuple(sweep_overrides))
        return real(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    proc = run_app("-m", *HASH, "retriever=bm25", "dataset.limit=2", "chunker.chunk_size=200,300,400", "tracker=none",
                   f"cache.dir={tmp_path / 'cache'}", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(composed) == len(set(composed)) == 3
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from ragexp.sweep.composed import ComposedOnce

    jobs = [OmegaConf.load(meta.parent / ".hydra" / "config.yaml") for meta in (tmp_path / "sweep").glob("*/run.json")]
    assert sorted(job.chunker.chunk_size for job in jobs) == [200, 300, 400]

    if GlobalHydra.instance().is_initialized():  # the loader's own method is back after the sweep
        assert not isinstance(GlobalHydra.instance().config_loader().__dict__.get("load_sweep_config"), ComposedOnce)


@pytest.mark.parametrize("verbose", [False, True])
def test_a_sweeps_jobs_print_one_line_each_and_keep_the_rest_in_their_logs(tmp_path, verbose):
    """A 24-configuration race printed ~3,900 lines, burying its progress: a job now prints one line
    (its objective, questions, warnings and where its log is); its stage timings and summary are in
    its ragexp.log. verbose=true puts them back on the console."""
    from conftest import HASH, run_app

    proc = run_app("-m", *HASH, "retriever=bm25", "dataset.limit=2", "chunker.chunk_size=200,300", "tracker=none",
                   f"verbose={str(verbose).lower()}", f"cache.dir={tmp_path / 'cache'}", "hydra.sweep.dir=sweep",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("  -> ")]
    if verbose:
        assert not lines and proc.stdout.count("scores by judge") == 2
    else:
        assert len(lines) == 2 and "scores by judge" not in proc.stdout and "chunking:" not in proc.stdout
        assert all("overall_score" in line and "over 2 questions (0 failed)" in line for line in lines)
    for job in ("0", "1"):
        logged = (tmp_path / "sweep" / job / "ragexp.log").read_text()
        assert "scores by judge" in logged and "chunking:" in logged


def test_a_setting_given_without_its_group_is_named_with_where_it_lives(tmp_path):
    """Hydra says "Could not override 'repeats'" and suggests +repeats=..., which adds a key that
    nothing reads; ragexp adds which setting was probably meant."""
    proc = run_cli("repeats=3", cwd=tmp_path)
    assert proc.returncode == 2
    assert ("ragexp: error: repeats is not a setting of this command; did you mean judge.repeats? "
            "(`+repeats=...` would add a key that nothing reads; --help lists the settings)") in proc.stderr
