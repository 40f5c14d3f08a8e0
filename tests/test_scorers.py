"""ragexp's judges as MLflow scorers: mlflow.genai.evaluate with them gives, per question and on
average, the values a ragexp run gives on the same outputs (a real store: SQLite, and `mlflow server`)."""
import pytest

from ragexp import evaluate
from ragexp.scorers import judge_scorers

FAST = ["embedder@scoring_embedder=hash"]
ROWS = [
    ("Which port does quarryd listen on?", "Port 7070.", ["quarryd listens on port 7070."], "7070"),
    ("How long can a job stay active?", "12 hours.", ["Queues have no hard limit."], "At most 12 hours."),
    ("How often are the keys refreshed?", "quarryd refreshes the signing keys every 15 minutes.",
     ["quarryd refreshes the signing keys every 15 minutes."], "Every 15 minutes."),
]


def test_mlflow_genai_evaluate_with_ragexp_scorers_gives_ragexp_values(mlflow_store, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)  # MLflow's default experiment keeps its artifacts in ./mlruns
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(mlflow_store)
    data = [{"inputs": {"question": q}, "outputs": {"response": a, "retrieved_contexts": c},
             "expectations": {"expected_response": r}} for q, a, c, r in ROWS]
    scorers = judge_scorers("offline", FAST)
    assert [s.name for s in scorers] == ["context_relevance", "answer_similarity", "faithfulness",
                                         "claim_hallucination_rate", "conciseness_offline", "coherence_offline",
                                         "hallucination"]
    result = mlflow.genai.evaluate(data=data, scorers=scorers)
    ours = evaluate([{"question": q, "answer": a, "contexts": c, "reference": r} for q, a, c, r in ROWS],
                    overrides=[*FAST, "cache.enabled=false"], output_dir=tmp_path / "run")
    for name in ("context_relevance", "answer_similarity", "faithfulness", "claim_hallucination_rate"):
        assert result.metrics[f"{name}/mean"] == pytest.approx(ours.aggregates[f"avg_{name}"], abs=1e-3)
    assert result.metrics["hallucination/mean"] == pytest.approx(ours.aggregates["hallucination_rate"], abs=1e-3)
    table = ours.table.set_index("question")
    frame = result.result_df
    assert len(frame) == len(ROWS)
    for _, row in frame.iterrows():
        question = row["request"]["question"] if isinstance(row["request"], dict) else row["request"]
        assert row["faithfulness/value"] == pytest.approx(table.at[question, "faithfulness"])
        assert bool(row["hallucination/value"]) is bool(table.at[question, "hallucination"])


def test_a_bad_setting_is_one_line_before_any_scoring():
    from ragexp.errors import RagexpError

    with pytest.raises(RagexpError, match="judge.support_threshold"):
        judge_scorers("offline", [*FAST, "judge.support_threshold=7"])
