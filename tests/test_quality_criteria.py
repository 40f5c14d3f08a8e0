"""A gated run logged to MLflow carries its gate as MLflow's quality criteria (ragexp.store.quality_criteria):
the tag `mlflow.genaiEvaluate.qualityCriteria` with the rules that map, the metrics they name, and what
does not map listed beside them. (That MLflow's own builder and parser agree: tests/test_contracts.py.)"""
import json

import pytest

from conftest import HASH, compose


@pytest.mark.parametrize("written,scale", [((0, 1), (1, 10)), ((0, 1), (0, 1)), ((1, 5), (0, 1)), ((0, 100), (1, 10))])
def test_a_bound_is_mapped_onto_the_runs_scale_as_the_gate_maps_it(written, scale):
    from ragexp.metrics.gate import parse_threshold
    from ragexp.store.quality_criteria import on_scale

    for bound in (0.0, 0.35, 0.9, 1.0, 3.0):
        threshold = parse_threshold("faithfulness", {"min": bound, "scale": list(written)})
        assert on_scale(bound, list(written), list(scale)) == threshold.on_scale(bound, scale)


def test_a_gated_run_is_logged_with_its_quality_criteria(tmp_path, monkeypatch):
    """gate=production's thresholds on a run of the offline judge: faithfulness >= 0.9 on 0-1 is the
    rule faithfulness/mean >= 9.1 (the run's 1-10 scale), the run has that metric (= avg_faithfulness);
    hit_rate@5 and mrr are not scores on the traces, and the conversion is said, in ragexp's tag."""
    import mlflow

    from ragexp.run.pipeline import run as run_pipeline
    from ragexp.store.quality_criteria import NOT_MAPPED, QUALITY_CRITERIA
    from ragexp.config.build import from_yaml

    monkeypatch.chdir(tmp_path)
    cfg = compose(*HASH, "retriever=bm25", "dataset.limit=6", "gate=production", "~gate.thresholds.answer_relevance",
                  "+gate.thresholds.hallucination_rate.max=0.2", f"cache.dir={tmp_path / 'cache'}")
    result = run_pipeline(cfg, "gated")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from omegaconf import OmegaConf

    run_id = from_yaml("tracker/mlflow", experiment="gated", tracking_uri=uri).log_run(result, OmegaConf.to_container(cfg, resolve=True))
    run = mlflow.MlflowClient(uri).get_run(run_id)
    criteria = json.loads(run.data.tags[QUALITY_CRITERIA])
    assert criteria["schemaVersion"] == 1 and criteria["revision"]
    assert criteria["rules"] == [{"metricKey": "faithfulness/mean", "comparator": "GTE", "threshold": 9.1},
                                 {"metricKey": "hallucination/mean", "comparator": "LTE", "threshold": 0.2}]
    assert run.data.metrics["faithfulness/mean"] == run.data.metrics["avg_faithfulness"]
    assert run.data.metrics["hallucination/mean"] == run.data.metrics["hallucination_rate"]
    assert run.data.tags[NOT_MAPPED].split("; ") == [
        "hit_rate@5: hit_rate_at_5 is not the mean of a score on each question's trace",
        "mrr: mrr is not the mean of a score on each question's trace",
        "faithfulness >= 0.9 on [0, 1]: the rule says 9.1, on the run's scale [1, 10]"]


def test_an_ungated_run_has_no_quality_criteria(tmp_path, monkeypatch):
    import mlflow

    from ragexp.run.pipeline import run as run_pipeline
    from ragexp.store.quality_criteria import NOT_MAPPED, QUALITY_CRITERIA
    from ragexp.config.build import from_yaml

    monkeypatch.chdir(tmp_path)
    cfg = compose(*HASH, "retriever=bm25", "dataset.limit=3", f"cache.dir={tmp_path / 'cache'}")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    from omegaconf import OmegaConf

    run_id = from_yaml("tracker/mlflow", experiment="plain", tracking_uri=uri).log_run(run_pipeline(cfg, "plain"), OmegaConf.to_container(cfg, resolve=True))
    run = mlflow.MlflowClient(uri).get_run(run_id)
    assert QUALITY_CRITERIA not in run.data.tags and NOT_MAPPED not in run.data.tags
    assert not any(key.endswith("/mean") for key in run.data.metrics)
