"""One meaning per name: `hallucination_rate` is the share of questions with a hallucination for
every judge (the triad's share of unsupported claims is `claim_hallucination_rate`), and a metric
that holds by construction for the configuration is marked so, not rated against its target."""
import json

from conftest import HASH, TEST_KEY_ENV, run_app

from ragexp.components.generators import ExtractiveGenerator, OpenAIGenerator
from ragexp.judges.offline import OfflineJudge
from ragexp.judges.triad import TriadJudge
from ragexp.metrics.scoring import by_construction
from ragexp.metrics.targets import BY_CONSTRUCTION, UNIT, assess, target_for

ARGS = ["dataset.limit=3", "retriever=bm25", *HASH, "tracker=none"]


def test_hallucination_rate_has_one_target_and_the_claim_share_a_name_of_its_own():
    # the same target (spec 000: count(hallucination) / questions) whatever the judge's scales
    assert target_for("hallucination_rate", UNIT).source.startswith("spec 000")
    # the share of unsupported claims has its own name (spec 6.4.1) for both judges that give it
    assert "claim_hallucination_rate" in TriadJudge.metrics and "claim_hallucination_rate" in OfflineJudge.metrics
    assert target_for("avg_claim_hallucination_rate", UNIT).describe() == "good <= 0.05, warning > 0.1"


def test_declared_metrics_are_marked_by_construction_instead_of_rated():
    aggregates = {"avg_faithfulness": 10.0, "hallucination_rate": 0.0, "avg_context_relevance": 9.0,
                  "avg_claim_hallucination_rate": 0.5}
    scales = {"avg_faithfulness": (1.0, 10.0), "hallucination_rate": UNIT, "avg_context_relevance": (1.0, 10.0),
              "avg_claim_hallucination_rate": UNIT}
    assert assess(aggregates, scales) == {"avg_faithfulness": "good", "hallucination_rate": "good",
                                          "avg_context_relevance": "good", "avg_claim_hallucination_rate": "warning"}
    constructed = by_construction(ExtractiveGenerator)
    assert constructed == {"avg_faithfulness", "hallucination_rate", "avg_claim_hallucination_rate"}
    assert assess(aggregates, scales, constructed) == {
        "avg_faithfulness": BY_CONSTRUCTION, "hallucination_rate": BY_CONSTRUCTION,
        "avg_context_relevance": "good", "avg_claim_hallucination_rate": BY_CONSTRUCTION}
    assert by_construction(OpenAIGenerator, OfflineJudge) == frozenset()  # an LLM's answer can invent anything


def statuses(tmp_path) -> dict:
    return json.loads(next(tmp_path.glob("outputs/*/*/run.json")).read_text())["statuses"]


def test_the_extractive_runs_console_and_run_json_say_by_construction(tmp_path):
    proc = run_app(*ARGS, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert lines["avg_faithfulness"].endswith("by construction") and lines["hallucination_rate"].endswith("by construction")
    assert not lines["avg_context_relevance"].endswith("by construction")
    assert ("  by construction: avg_faithfulness, avg_claim_hallucination_rate, hallucination_rate hold for this "
            "configuration") in proc.stdout
    found = statuses(tmp_path)
    assert found["avg_faithfulness"] == found["hallucination_rate"] == BY_CONSTRUCTION
    assert found["avg_context_relevance"] in ("good", "ok", "warning")


def test_an_llm_generators_faithfulness_is_rated_against_its_target(tmp_path, server):
    args = ["generator=openai", f"generator.endpoint.base_url={server.base_url}",
            f"generator.endpoint.api_key_env={TEST_KEY_ENV}", "generator.endpoint.backoff_s=0.01"]
    proc = run_app(*ARGS, *args, cwd=tmp_path, env={TEST_KEY_ENV: "test-key"})
    assert proc.returncode == 0, proc.stderr
    assert BY_CONSTRUCTION not in proc.stdout
    found = statuses(tmp_path)
    assert found["avg_faithfulness"] in ("good", "ok", "warning") and found["hallucination_rate"] in ("good", "ok", "warning")
