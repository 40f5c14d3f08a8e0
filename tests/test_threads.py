"""The CPU models' threads wait rather than spin (ragexp.base.threads), unless you say otherwise."""
import os
import sys

import pytest

from ragexp.base.threads import passive_waiting


@pytest.mark.parametrize("given, kept", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_threads_wait_passively_unless_you_set_the_policy(monkeypatch, given, kept):
    monkeypatch.setenv("OMP_WAIT_POLICY", given or "")  # recorded, so that the policy set here is undone after
    if given is None:
        monkeypatch.delenv("OMP_WAIT_POLICY")
    from ragexp.components.embedders import local_model

    monkeypatch.setattr(local_model, "load_sentence_transformer", local_model.load_sentence_transformer.__wrapped__)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # stop before torch loads
    with pytest.raises(ImportError):
        local_model.load_sentence_transformer("unused", "cpu")
    assert os.environ["OMP_WAIT_POLICY"] == kept
    passive_waiting()
    assert os.environ["OMP_WAIT_POLICY"] == kept
