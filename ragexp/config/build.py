"""Config nodes to objects: `build(node)` (Hydra's instantiate, a RagexpError from a constructor
passed on as is), `from_yaml("judge/offline", ...)` (a component built in Python from its option's
YAML, where its defaults are written), `settings(node)` (a component's resolved config, what goes into
its stage's cache key), and `components(cfg)`: every component of a run built and checked against
the others."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from ragexp.components.rerankers import NoReranker, Reranker
from ragexp.components.systems import PipelineSystem, System
from ragexp.errors import RagexpError
from ragexp.judges.contract import Judge
from ragexp.judges.rubric.beside import rubric_beside, with_rubric
from ragexp.llm.session import LLMSession
from ragexp.metrics import MetricSet
from ragexp.metrics.relevance import CONTEXT_METRICS, RelevanceRule
from ragexp.metrics.scoring import JudgesWeights, Weights, aggregate_key, aggregate_scales

if TYPE_CHECKING:
    from ragexp.components.chunkers import Chunker
    from ragexp.components.retrievers import Retriever
    from ragexp.datasets import Loader
    from ragexp.metrics.gate import Gate


def build(node: DictConfig, **kwargs):
    """`hydra.utils.instantiate`, with a RagexpError raised inside a constructor passed on as is."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        cause = err.__cause__
        while cause is not None and not isinstance(cause, RagexpError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise RagexpError(str(err).replace("\n", " ")) from None


# options composed inside others (judge=llm's endpoint), and groups of another primary config (synth's generator)
INSIDE = {"endpoint": ("config", ("judge=llm",), "judge.endpoint")}
PRIMARY = {"synth": "synth", "monitor": "monitor"}


def from_yaml(option: str, **settings: Any):
    """The component of `conf/<group>/<name>.yaml` (`option` is "group/name", e.g. "judge/offline"; a
    bare name is that node of conf/config.yaml, e.g. "cache"), built as `python -m ragexp group=name`
    builds it: the option composed with the default config (its defaults list, its interpolations
    such as `${scoring_embedder}`), `settings` given over its values. A class's signature has no
    default for a setting its YAML sets (the YAML holds it, once), so Python code builds a component
    through here, or passes every setting. A mapping given for a nested component is merged into its
    node (`endpoint={"base_url": url}`); a mapping naming another `_target_` (another component, all
    its settings given) and any other value replace the YAML's; an object (an embedder,
    an endpoint already built, a mapping of them) is handed to the class as it is. `_target_=cls`
    builds `cls` (a subclass of the option's class, such as a test's instrumented one) with them."""
    kind = settings.pop("_target_", None)
    group, _, name = option.rpartition("/")
    node = copy.deepcopy(option_node(group, name))  # the composed config stays as composed; the copy keeps its
    node._set_flag(["struct", "readonly"], [False, False])  # parent, where its interpolations are read
    objects = {}
    for key, value in settings.items():
        if not plain(value):
            objects[key] = value
            node.pop(key, None)
        elif (isinstance(value, dict) and OmegaConf.is_dict(node.get(key))
              and node[key].get("_target_") is not None and value.get("_target_", node[key]._target_) == node[key]._target_):
            node[key] = OmegaConf.merge(node[key], value)
        else:
            node[key] = value
    made = build(node, _partial_=True)  # the settings, nested components built; the class is called here
    return (kind or made.func)(*made.args, **{**made.keywords, **objects})


def plain(value: Any) -> bool:
    """Whether `value` is config (None, a string, number or bool, or lists and mappings of them)."""
    if isinstance(value, (list, tuple)):
        return all(plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and plain(v) for k, v in value.items())
    return value is None or isinstance(value, (str, int, float, bool))


@cache
def option_node(group: str, name: str) -> DictConfig:
    """The config node of option `group/name`, composed once per process (ragexp.config.compose)."""
    from ragexp.config.compose import compose

    primary, overrides, where = INSIDE.get(group, ("config", (), group))
    if group.split("/")[0] in PRIMARY:
        primary, where = PRIMARY[group.split("/")[0]], group.replace("/", ".")
    choice = [] if not group else [f"{group}@{where}={name}"] if group in INSIDE else [f"{group}={name}"]
    where = where or name
    cfg, _ = compose([*overrides, *choice], config_name=primary)
    node = OmegaConf.select(cfg, where)
    if not OmegaConf.is_dict(node) or "_target_" not in node:
        raise RagexpError(f"{option_name(group, name)}: not a component's option (no _target_ there)")
    return node


def option_name(group: str, name: str) -> str:
    return f"conf/{group}/{name}.yaml" if group else f"{name} of conf/config.yaml"


def settings(node: DictConfig) -> dict:
    """A component's resolved config: what goes into its stage's cache key."""
    return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]  # a DictConfig gives a dict


@dataclass
class Components:
    """A run's components, each built from its config node (building is cheap). The chunker,
    retriever and generator exist only when the system under test is ragexp's own pipeline."""

    weights: Weights
    gate: Gate
    metric_set: MetricSet
    rule: RelevanceRule
    loader: Loader
    system: System
    chunker: Chunker | None
    retriever: Retriever | None
    reranker: Reranker
    generator: Any
    judge: Judge
    llm: LLMSession
    scales: dict[str, tuple[float, float]]
    # the resolved settings each built stage component was made from (chunker, retriever, reranker,
    # generator, judge, rubric): what its stage's cache keys are made of, so that stages need no config
    settings: dict[str, dict]
    judging: Judge  # what judges the run: the judge, with the rubric beside it when one is chosen
    rubric: Judge | None = None  # a rubric judged beside the judge (rubric=NAME with judge=llm, ...)
    targets: tuple = ()  # the targets a rubric gives its criteria (ragexp.metrics.targets.Target)
    untargeted: tuple[str, ...] = ()  # aggregates no built-in target is about (a rubric judge's overall_score)


def components(cfg: DictConfig) -> Components:
    """Every component built and checked against the others, before any work."""
    weights = build(cfg.weights)
    gate, metric_set, rule = build(cfg.gate), build(cfg.metrics), build(cfg.relevance)
    metric_set.require(gate.retrieval_metrics())
    system = build(cfg.system) if "system" in cfg else PipelineSystem()
    loader, judge = build(cfg.dataset), build(cfg.judge)
    if judge.only_in_cascade:  # a judge of a cascade's sample alone: what to choose instead
        raise RagexpError(judge.only_in_cascade)
    if isinstance(weights, JudgesWeights):  # weights=judge: the judge's own
        weights = weights.of(judge)
    chunker, retriever, generator = (build(cfg.chunker), build(cfg.retriever), build(cfg.generator)) if system.own \
        else (None, None, None)
    reranker = build(cfg.reranker) if system.own and "reranker" in cfg else NoReranker()
    reranker.check()
    weights.check(judge.name, judge.metrics)
    rubric = rubric_beside(judge, build(cfg.rubric)) if cfg.get("rubric") is not None else None
    judges = [judge, *([rubric] if rubric is not None else [])]
    metrics = [m for j in judges for m in j.metrics]
    answer_metrics = [*metric_set.answer_metrics(), "generation_score"]
    retrieval_metrics = [*metric_set.names, *CONTEXT_METRICS]
    scales = aggregate_scales({m: s for j in judges for m, s in j.scales.items()}, weights,
                              answer_metrics, retrieval_metrics)
    produced = ([aggregate_key(m) for m in (*metrics, *answer_metrics)]
                + [aggregate_key(n, retrieval=True) for n in retrieval_metrics])
    flagged = ["hallucination_rate"] if any(j.flags_hallucination for j in judges) else []
    gate.check([*produced, *flagged, "overall_score", "total_questions", "failed_questions",
                "retrieval_excluded_questions"], scales, f" (judge {judge.name!r} gives {', '.join(metrics)})")
    llm = build(cfg.llm) if "llm" in cfg else from_yaml("llm/default")
    if llm.dry_run and not all(j.estimable for j in judges):
        raise RagexpError(f"dry_run: judge {judge.name!r} sends its requests through MLflow, which ragexp cannot count "
                          "before they are sent; run without dry_run on a few questions (dataset.limit=5) to see them")
    built = ["judge", *(["chunker", "retriever", "generator"] if system.own else []),
             *(["reranker"] if system.own and "reranker" in cfg else [])]
    judged_with = {group: settings(cfg[group]) for group in built}
    judging = judge
    if rubric is not None:  # its cache key: the rubric, and the endpoint it borrows from the judge
        borrowed = settings(cfg.judge.endpoint) if rubric.sends_requests else None
        judged_with["rubric"] = {"rubric": settings(cfg.rubric), "endpoint": borrowed}
        judging = with_rubric(judge, rubric, judged_with["rubric"])
    return Components(weights, gate, metric_set, rule, loader, system, chunker, retriever, reranker, generator, judge,
                      llm, scales, judged_with, judging, rubric, targets(judge, rubric), judge.untargeted)


def targets(judge: Judge, rubric: Judge | None) -> tuple:
    """The targets the judges give their own metrics; a rubric beside another judge has no say on
    that judge's overall_score."""
    beside = tuple(t for t in rubric.targets if t.metric != "overall_score") if rubric is not None else ()
    return (*judge.targets, *beside)
