"""Every YAML under conf/ composes, and every component in it instantiates."""

import pytest
from hydra.utils import instantiate

from conftest import CONF, ENGINE_OPTIONS, compose, engine_option, require_engine

GLOBAL = ("experiment", "cluster", "search")  # @package _global_ options, added with +group=option
NESTED = {"endpoint": "judge"}  # groups composed inside an option (judge=llm's endpoint), chosen as endpoint@judge.endpoint=...
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in GLOBAL and p.name not in NESTED)
OPTIONS = [(group, yml.stem) for group in GROUPS for yml in sorted((CONF / group).glob("*.yaml"))]
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


def test_every_group_has_options():
    assert {"dataset", "chunker", "embedder", "retriever", "generator", "judge", "weights", "tracker"} <= set(GROUPS)
    assert {"chunking_grid", "retrieval_grid"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_instantiates(group, option):
    cfg = compose(f"{group}={option}")
    component = instantiate(cfg[group])
    target = cfg[group]["_target_"]
    assert type(component).__name__ == target.rsplit(".", 1)[1]


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "endpoint").glob("*.yaml")))
def test_an_endpoint_option_composes_inside_every_component_that_sends_requests(option):
    """One endpoint group for all of them: chosen for one component with endpoint@GROUP.endpoint,
    the same node wherever it is used; no other YAML file writes an endpoint out."""
    from ragexp.llm.endpoint import Endpoint

    nodes = [compose("judge=llm", f"endpoint@judge.endpoint={option}").judge.endpoint,
             compose("generator=openai", f"endpoint@generator.endpoint={option}").generator.endpoint,
             compose("reranker=llm", f"endpoint@reranker.endpoint={option}").reranker.endpoint,
             compose("judge=triad", f"endpoint@judge.endpoint={option}").judge.endpoint]
    assert all(n == nodes[0] for n in nodes) and isinstance(instantiate(nodes[0]), Endpoint)
    assert compose("judge=local").judge.endpoint == compose("judge=llm", "endpoint@judge.endpoint=local").judge.endpoint
    written = [str(p.relative_to(CONF)) for p in CONF.rglob("*.yaml")
               if "ragexp.llm.endpoint.Endpoint" in p.read_text() and p.parent.name != "endpoint"]
    assert written == []


def test_an_options_help_lists_the_settings_of_its_endpoint():
    from ragexp.config.docs import command_help

    shown = command_help("config", ["judge=local"])
    assert "judge.endpoint.base_url=http://127.0.0.1:8000/v1" in shown and "endpoint@judge.endpoint=NAME" in shown
    assert "judge.endpoint.model=gpt-4o-mini" in command_help("config", ["judge=llm"])
    assert "+endpoint=" not in command_help("config")  # chosen inside an option, not at the top


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes(name):
    cfg = compose(f"+experiment={name}")
    for group in ("chunker", "retriever", "judge", "weights"):
        instantiate(cfg[group])
    assert cfg.tracker.experiment == name


def test_value_overrides_reach_the_components():
    cfg = compose("chunker.chunk_size=256", "retriever.top_k=10")
    assert instantiate(cfg.chunker).chunk_size == 256
    assert instantiate(cfg.retriever).top_k == 10


def test_weights_that_do_not_sum_to_one_are_an_error():
    from ragexp.validation import problems

    assert problems(compose("weights.answer_similarity=0.5")) == [
        "weights: context_relevance=0.3 + answer_similarity=0.5 + faithfulness=0.3 = 1.1; "
        "the weights must sum to 1 (set weights.<metric>=...)"]


def test_a_judge_option_brings_its_weights_unless_the_command_line_chooses_others():
    from ragexp.validation import problems

    def weighted(*overrides):
        return {k: v for k, v in compose(*overrides).weights.items() if k != "_target_"}

    triad = {"context_relevance": 0.25, "faithfulness": 0.5, "answer_relevance": 0.25, "hallucination_penalty": False}
    single_call = {"context_relevance": 0.3, "answer_similarity": 0.4, "faithfulness": 0.3, "hallucination_penalty": True}
    assert weighted("judge=triad") == triad
    assert problems(compose("judge=triad")) == []
    assert weighted("judge=llm") == weighted() == single_call
    assert weighted("judge=triad", "weights=default") == single_call
    assert weighted("judge=triad", "weights.faithfulness=0.4", "weights.answer_relevance=0.35")["faithfulness"] == 0.4


SCALE_OUT = [f"+{group}={p.stem}" for group in ("cluster", "search") for p in sorted((CONF / group).glob("*.yaml"))]


@pytest.mark.parametrize("option", [engine_option(o) for o in SCALE_OUT])
def test_scale_out_configs_compose_with_their_plugin(option):
    if option in ENGINE_OPTIONS:  # submitit (+cluster=slurm) is in the default install
        require_engine(ENGINE_OPTIONS[option])
    cfg = compose(option)
    assert cfg.objective == "overall_score"
