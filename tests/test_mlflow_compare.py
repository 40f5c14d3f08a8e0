"""`mlflow.genai.compare_evaluations` (MLflow 3.18, experimental: tests/test_contracts.py) reads two
ragexp runs: each question's trace carries its pairing id as MLflow's evaluation request id, so the two
runs' questions pair on it, and the scores on the traces (by default those the overall score weighs,
and hallucination: tracker.feedback) are its scorers. Beside it, ragexp's own paired comparison (`ragexp.compare`, the same test
as the gate's baseline check) on the same questions: the same pairs and the same mean difference, but
another test (MLflow: Wilcoxon's signed ranks, McNemar's for yes/no, no correction across scorers;
ragexp: a permutation test of the mean, Holm across the comparisons), so the two can disagree; when
they do is said in docs/how-to/compare.md."""
import dataclasses

import pytest

from conftest import HASH, compose, needs_mlflow_318


@pytest.fixture
def judged(tmp_path, monkeypatch):
    """The sample's 40 questions answered and judged (hash embedder, BM25, offline judge), its config."""
    from ragexp.run.pipeline import run as run_pipeline

    monkeypatch.chdir(tmp_path)
    cfg = compose(*HASH, "retriever=bm25", f"cache.dir={tmp_path / 'cache'}")
    return run_pipeline(cfg, "judged")


def logged(result, name: str, uri: str) -> str:
    from ragexp.config.build import from_yaml

    return from_yaml("tracker/mlflow", experiment="compare", tracking_uri=uri).log_run(dataclasses.replace(result, name=name),
                                                 {"judge": {"_target_": "ragexp.judges.offline.OfflineJudge"}})


def with_faithfulness(result, values: list[float]):
    """`result` with its questions' faithfulness planted (`values`, in question order) and its
    aggregates computed again from them."""
    from ragexp.metrics.scoring import compute

    questions = tuple(dataclasses.replace(q, judgement=dataclasses.replace(q.judgement, scores={
        **q.judgement.scores, "faithfulness": value})) for q, value in zip(result.questions, values, strict=True))
    return dataclasses.replace(result, questions=questions,
                               aggregates={**result.aggregates, **compute(result.aggregation, questions)})


def test_compare_evaluations_pairs_two_ragexp_runs_on_their_questions(judged, tmp_path):
    needs_mlflow_318()
    import mlflow

    from ragexp.compare import make

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert all(q.judgement is not None for q in judged.questions) and len(judged.questions) == 40
    base = [q.judgement.scores["faithfulness"] for q in judged.questions]
    lowered = [max(1.0, v - 2) if i % 3 == 0 else v for i, v in enumerate(base)]  # a third of the answers worse
    baseline, candidate = logged(judged, "baseline", uri), logged(with_faithfulness(judged, lowered), "candidate", uri)
    mlflow.set_tracking_uri(uri)

    result = mlflow.genai.compare_evaluations(candidate_run_id=candidate, baseline_run_id=baseline)
    assert len(result.paired_rows) == 40 and {r["paired_on"] for r in result.paired_rows} == {"eval_request_id"}
    assert result.unpaired_baseline_trace_ids == result.unpaired_candidate_trace_ids == []
    # the scores on the traces (tracker.feedback=main: those overall_score weighs, and hallucination)
    assert set(result.scorers) == {"context_relevance", "answer_similarity", "faithfulness", "hallucination"}
    faithfulness = result.scorers["faithfulness"]
    expected = sum(low - high for low, high in zip(lowered, base)) / 40
    assert faithfulness.n_paired == 40 and faithfulness.diff == pytest.approx(expected)
    assert faithfulness.method.startswith("wilcoxon") and result.scorers["hallucination"].method.startswith("mcnemar")
    unchanged = result.scorers["context_relevance"]
    assert unchanged.diff == 0 and unchanged.p_value == 1.0

    board, _, _ = make([candidate, baseline], uri, objective="avg_faithfulness", out_dir=tmp_path / "report",
                       plots=False, log=False, resamples=2000)
    ours = next(e for e in board.entries if e.run.run_id == candidate)
    assert board.best.run.run_id == baseline and ours.comparison.shared == 40
    assert ours.comparison.test.difference.estimate == pytest.approx(expected, abs=1e-4)  # the same difference
    print(f"faithfulness, candidate - baseline: MLflow {faithfulness.diff:+.3f} [{faithfulness.ci_low:.3f}, "
          f"{faithfulness.ci_high:.3f}] p={faithfulness.p_value:.2g} ({faithfulness.method}); ragexp "
          f"{ours.comparison.test.difference.estimate:+.3f} [{ours.comparison.test.difference.low:.3f}, "
          f"{ours.comparison.test.difference.high:.3f}] p={ours.comparison.test.p_value:.2g} -> {ours.verdict}")
    assert ours.verdict == "worse" and faithfulness.p_value < 0.05  # a clear drop: both see it


def test_on_a_few_large_drops_among_many_small_gains_the_two_tests_disagree(judged, tmp_path):
    needs_mlflow_318()
    """34 answers gain 1 point of faithfulness, 6 lose 7: the mean falls by 0.2. MLflow's signed-rank
    test finds the candidate significantly different (most differences are gains), while its own
    mean difference is negative, and `assert_improved` refuses it; ragexp's test of the mean sees no
    significant change (the drops weigh as much as the gains)."""
    import mlflow

    from ragexp.compare import make

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    big = set(range(0, 40, 7))  # 6 questions
    baseline = logged(with_faithfulness(judged, [9.0 if i in big else 5.0 for i in range(40)]), "baseline", uri)
    candidate = logged(with_faithfulness(judged, [2.0 if i in big else 6.0 for i in range(40)]), "candidate", uri)
    mlflow.set_tracking_uri(uri)

    theirs = mlflow.genai.compare_evaluations(candidate_run_id=candidate, baseline_run_id=baseline).scorers["faithfulness"]
    board, _, _ = make([candidate, baseline], uri, objective="avg_faithfulness", out_dir=tmp_path / "report",
                       plots=False, log=False, resamples=2000)
    ours = next(e for e in board.entries if e.run.run_id == candidate)
    print(f"faithfulness, candidate - baseline: MLflow {theirs.diff:+.3f} p={theirs.p_value:.2g} ({theirs.method}); "
          f"ragexp {ours.comparison.test.difference.estimate:+.3f} p={ours.comparison.test.p_value:.2g} -> {ours.verdict}")
    assert theirs.diff == pytest.approx(-0.2) and ours.comparison.test.difference.estimate == pytest.approx(-0.2)
    assert theirs.p_value < 0.05 and ours.comparison.test.p_value > 0.2 and ours.verdict == "≈ best"
    with pytest.raises(AssertionError, match="did not significantly improve"):
        mlflow.genai.compare_evaluations(candidate_run_id=candidate, baseline_run_id=baseline).assert_improved(["faithfulness"])
