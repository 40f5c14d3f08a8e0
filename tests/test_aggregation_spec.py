"""The aggregation spec: scoring makes it, the run writes it (aggregates.json) and logs it, compare
reads it; every aggregate is recomputed from the per-question table (model-free hash embedder)."""
import json

import pytest

from conftest import TEST_KEY_ENV, compose, llm_args
from ragexp.run.pipeline import run
from ragexp.store.run_folder import question_table, write_results
from ragexp.metrics.scoring import Aggregate
from ragexp.config.build import from_yaml

HASH = ("embedder=hash", "embedder@scoring_embedder=hash", "dataset.limit=8", "tracker=none")
# not the specification's weights, and no hallucination penalty
WEIGHTS = ("weights.context_relevance=0.6", "weights.answer_similarity=0.1", "weights.faithfulness=0.3",
           "weights.hallucination_penalty=false")


def table_rows(result) -> list[dict]:
    table = question_table(result)
    return [dict(zip(table, values)) for values in zip(*table.values())]


def test_the_spec_reproduces_results_json_from_the_per_question_table(tmp_path):
    result = run(compose(*HASH, f"cache.dir={tmp_path / 'cache'}", "metrics.retrieval=[mrr,ndcg@3,recall@5]"), "spec")
    write_results(result, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())["spec"]
    written = json.loads((tmp_path / "aggregates.json").read_text())
    spec = [Aggregate.from_json(entry) for entry in written["aggregates"]]
    assert written["run"] == "spec" and tuple(spec) == result.aggregation
    # every aggregate of results.json is described, in the same order
    assert [a.name for a in spec] == [k for k in results if k != "judge"]
    rows = table_rows(result)
    columns = set(rows[0])
    for aggregate in spec:
        assert set(aggregate.inputs) <= columns, aggregate.name  # the table holds every input
        value = aggregate.value(rows)
        expected = results[aggregate.name]
        assert (value if aggregate.kind == "count" else round(value, 4)) == expected, aggregate.name
    by_name = {a.name: a for a in spec}
    overall_inputs = ("context_relevance", "answer_similarity", "faithfulness", "hallucination")
    assert by_name["overall_score"].inputs == overall_inputs
    assert by_name["overall_score"].weights == (0.3, 0.4, 0.3) and by_name["overall_score"].penalty
    assert by_name["ndcg_at_3"] == Aggregate("ndcg_at_3", ("ndcg_at_3",), "mean", "valued")
    assert by_name["avg_token_f1"].rows == "valued" and by_name["avg_faithfulness"].rows == "judged"


def test_a_failed_question_is_counted_not_averaged():
    from ragexp.metrics.scoring import Weights, aggregation_spec, compute
    from ragexp.types import Judgement, Question, QuestionResult

    q = Question("q", "?", ("a",))
    judged = [QuestionResult(q, judgement=Judgement("t", {"faithfulness": s}, h, ""), retrieval={"mrr": m})
              for s, h, m in ((8.0, False, 1.0), (4.0, True, 0.5))]
    results = [*judged, QuestionResult(q, failure="boom", retrieval_excluded="no golden documents")]
    spec = aggregation_spec(results, Weights(faithfulness=1.0, hallucination_penalty=True))
    assert compute(spec, results) == {"avg_faithfulness": 6.0, "hallucination_rate": 0.5, "total_questions": 3,
                                      "failed_questions": 1, "overall_score": 3.0, "mrr": 0.75,
                                      "retrieval_excluded_questions": 1}


def test_compare_reads_the_logged_spec_and_reproduces_every_aggregate(tmp_path):
    from ragexp.compare.leaderboard import build as leaderboard
    from ragexp.compare.metrics import FROM_TABLE, specs_for
    from ragexp.store.reader import select

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = from_yaml("tracker/mlflow", experiment="spec-test", tracking_uri=uri)
    ids = []
    for retriever in ("bm25", "dense"):
        cfg = compose(*HASH, *WEIGHTS, f"retriever={retriever}", f"cache.dir={tmp_path / 'cache'}")
        ids.append(tracker.log_run(run(cfg, retriever), {"retriever": retriever}))
    selection = select(ids, uri)
    assert not selection.notes
    board = leaderboard(selection, resamples=500)
    for entry in board.entries:
        logged = entry.run.metrics
        expected = {e["name"] for e in entry.run.aggregation if e["kind"] in FROM_TABLE}
        assert expected and {m for m in entry.specs if not m.startswith("mean ")} == expected
        for name in expected:  # each reproduced from the table, with its bootstrap CI
            spec = entry.specs[name]
            assert spec.value(entry.run.table) == pytest.approx(logged[name], abs=1e-4), name
            interval = entry.values[name]
            assert interval.estimate == logged[name] and interval.low <= interval.high
        overall = entry.specs["overall_score"]
        assert overall.weights == (0.6, 0.1, 0.3) and not overall.penalty
        assert overall.inputs == ("context_relevance", "answer_similarity", "faithfulness")
        # a run logged without aggregates.json (older ragexp): nothing is re-derived, no CI
        entry.run.aggregation = None
        assert all(m.startswith("mean ") for m in specs_for(entry.run))


def test_llm_totals_and_judge_repeats_are_in_the_spec(server, tmp_path, monkeypatch):
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    cfg = compose(*llm_args(server, judge="llm"), *HASH, "judge.repeats=2", f"cache.dir={tmp_path}")
    result = run(cfg, "llm")
    by_name = {a.name: a for a in result.aggregation}
    assert [a.name for a in result.aggregation] == list(result.aggregates)
    totals = [a.name for a in result.aggregation if a.kind == "total"]
    assert totals and all(a.inputs == () for a in map(by_name.get, totals))  # tokens, cost: not per question
    assert by_name["avg_faithfulness"].repeats == 2
    assert by_name["overall_score_std"] == Aggregate("overall_score_std", by_name["overall_score"].inputs, "std",
                                                     repeats=2, of="overall_score")
