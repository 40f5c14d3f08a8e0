"""Each stage of the pipeline is a package of ragexp.components with its contract in front
(base.py), and every option a config group offers for that stage keeps the contract: a new
chunker, embedder, retriever, reranker, generator or system under test is a subclass of it."""
import importlib

import pytest
from hydra.utils import get_class

from conftest import ROOT, compose

STAGES = {"chunker": "Chunker", "embedder": "Embedder", "retriever": "Retriever", "reranker": "Reranker",
          "generator": "Generator", "system": "System"}


@pytest.mark.parametrize("group", sorted(STAGES))
def test_every_option_of_a_stage_keeps_its_contract(group):
    base_module = importlib.import_module(f"ragexp.components.{group}s.base")
    contract = getattr(base_module, STAGES[group])
    options = sorted((ROOT / "conf" / group).glob("*.yaml"))
    assert options, f"conf/{group}/ has no option"
    broken = []
    for option in options:
        target = compose(f"{group}={option.stem}")[group]["_target_"]
        if not issubclass(get_class(target), contract):
            broken.append(f"{option.name}: {target}")
    assert broken == [], f"not a {contract.__name__} (ragexp/components/{group}s/base.py)"
