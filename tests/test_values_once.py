"""Each value once: a setting's default lives in its YAML, so a component's signature has no default
for a key its YAML sets (two defaults drift: the YAML's tuned value and the signature's old one would
make `Component(...)` built in Python another component than the one a run builds)."""
import inspect
from pathlib import Path

import pytest
from omegaconf import DictConfig, ListConfig, OmegaConf

from conftest import CONF

PRIMARY = ("config.yaml", "synth.yaml", "monitor.yaml")  # composed as they are
OWN = ("ragexp.", "hydra_plugins.ragexp")  # targets of ragexp's code (not Hydra's own launcher, logging, ...)


def targets_written(path: Path) -> set[str]:
    """The `_target_`s a YAML file writes itself, in nested nodes too (its defaults list's are its options')."""
    found = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("_target_"), str):
                found.add(node["_target_"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(OmegaConf.to_container(OmegaConf.load(path), resolve=False))
    return found


def composition(path: Path) -> tuple[str, list[str]]:
    """The primary config and overrides that compose `path` as a run would use it."""
    name = path.relative_to(CONF).with_suffix("").as_posix()
    if name + ".yaml" in PRIMARY:
        return name, []
    group, option = name.rsplit("/", 1)
    if group == "endpoint":  # an option composed inside the components that send requests
        return "config", ["judge=llm", f"endpoint@judge.endpoint={option}"]
    if group.startswith("synth/"):
        return "synth", [f"{group}={option}"]
    if group.startswith("monitor/"):
        return "monitor", [f"{group}={option}"]
    return "config", [f"{group}={option}"]


WRITTEN = sorted(p for p in CONF.rglob("*.yaml") if any(t.startswith(OWN) for t in targets_written(p)))


def compose(primary: str, overrides: list[str]) -> DictConfig:
    """The whole config, Hydra's own node (its callbacks, the sweeper) included."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return hydra_compose(config_name=primary, overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()


def nodes(node, path=""):
    """(path, node) of every config node with a `_target_`, unresolved."""
    if isinstance(node, (DictConfig, ListConfig)) and (node._is_none() or node._is_missing()):
        return
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield path, node
        for key in node:
            yield from nodes(node._get_node(key), f"{path}.{key}".lstrip("."))
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node._iter_ex(resolve=False)):
            yield from nodes(item, f"{path}[{i}]")


def defaulted(target: str, node: DictConfig) -> list[str]:
    """The settings `node` sets that the target's signature gives a default too, with that default."""
    from hydra.utils import get_object

    parameters = inspect.signature(get_object(target)).parameters
    return [f"{k}={parameters[k].default!r}" for k in node if not str(k).startswith("_")
            and k in parameters and parameters[k].default is not inspect.Parameter.empty]


def test_every_yaml_with_a_target_is_checked():
    names = {p.relative_to(CONF).as_posix() for p in WRITTEN}
    assert {"judge/offline.yaml", "endpoint/openai.yaml", "tracing/on.yaml", "tracing/off.yaml", "gate/none.yaml",
            "gate/production.yaml", "config.yaml", "synth.yaml", "monitor.yaml", "hydra/sweeper/racing.yaml",
            "synth/generator/llm.yaml"} <= names


@pytest.mark.parametrize("path", WRITTEN, ids=[p.relative_to(CONF).as_posix() for p in WRITTEN])
def test_a_signature_has_no_default_for_a_setting_its_yaml_sets(path):
    """Every component node the file writes (its nested ones too: a sub-config's endpoint, the
    synth's quality rules, Hydra's callbacks), with what its defaults list brings (gate=production
    has gate=none's settings), against its class's signature."""
    written = {t for t in targets_written(path) if t.startswith(OWN)}
    own = OmegaConf.load(path)
    # a file without a defaults list is its whole node (composing it would add nothing, at 0.5 s a file)
    composed = list(nodes(compose(*composition(path)) if "defaults" in own else own))
    primary = path.stem
    assert written <= {n["_target_"] for _, n in composed}, f"{path.name}: composed without its own components"
    found = {f"{where or primary} ({node['_target_']})": twice for where, node in composed
             if node["_target_"] in written and (twice := defaulted(node["_target_"], node))}
    assert found == {}, (f"the YAML sets these settings and the signature defaults them too (say a value once, "
                         f"in the YAML): {found}")


def test_from_yaml_merges_a_mapping_into_its_component_and_replaces_it_with_another_component():
    """from_yaml("embedder/ray", inner=...): the YAML's inner embedder is MiniLM; a mapping of settings
    changes that embedder, a mapping naming another `_target_` replaces it whole (MiniLM's model_path
    is not handed to the hashed embedder)."""
    from ragexp.config.build import from_yaml

    hashed = {"_target_": "ragexp.components.embedders.HashEmbedder", "dimension": 64, "name": "hash", "batch_size": 8}
    assert dict(from_yaml("embedder/ray", inner=hashed).inner) == hashed
    tuned = from_yaml("embedder/ray", inner={"batch_size": 4}).inner
    assert tuned["_target_"].endswith("SentenceTransformerEmbedder") and tuned["batch_size"] == 4 and "model_path" in tuned
