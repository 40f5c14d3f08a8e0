"""A sweep through an endpoint that gives 30% of its chat requests a random fault (seeded: 429
with and without Retry-After, 500, hangs past the timeout, truncated bodies, non-JSON, missing
fields, out-of-range and mistyped values): every question ends judged or failed with a reason,
and the endpoint saw exactly the requests the runs' counters report (llm_requests + llm_retries)."""
import json
import random
import re
from collections import Counter

import pytest

from conftest import llm_args, run_cli
from openai_server import FAULT_KINDS, OpenAIServer
from test_cli import mlflow_runs

pytestmark = pytest.mark.process
QUESTIONS = 15  # 2 jobs: at least 15 answers + 30 judgements sent, more than the 42 draws seed 7 needs
SEED = 7        # to give every kind of fault


def schedule(draws: int) -> dict[str, int]:
    """The faults `OpenAIServer(fault_rate=0.3, seed=SEED)` gives its first `draws` chat requests."""
    rng, kinds = random.Random(SEED), Counter()
    for _ in range(draws):
        if rng.random() < 0.3:
            kinds[rng.choice(FAULT_KINDS)] += 1
    return dict(kinds)


def test_a_sweep_through_30_percent_faults_accounts_for_every_question_and_request(tmp_path):
    with OpenAIServer(fault_rate=0.3, seed=SEED) as server:
        server.timeout_sleep = 3.0  # a hang: past the client's 1 s timeout
        args = llm_args(server, **{"judge.endpoint.timeout_s": 1, "generator.endpoint.timeout_s": 1,
                                   "judge.endpoint.max_retries": 3, "generator.endpoint.max_retries": 3})
        proc = run_cli("-m", *args, "embedder=hash", "embedder@scoring_embedder=hash", f"dataset.limit={QUESTIONS}",
                       "judge.temperature=0,0.5", "max_failed_share=1", cwd=tmp_path, env={"RAGEXP_TEST_LLM_KEY": "k"})
        seen = len(server.chat_requests())
        injected = dict(server.injected)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert injected == schedule(seen) and set(injected) == set(FAULT_KINDS)  # every kind of fault was met

    [sweep_dir] = tmp_path.glob("multirun/*/*")
    merged = json.loads((sweep_dir / "results.json").read_text())
    assert len(merged) == 2
    client, runs = mlflow_runs(tmp_path)
    jobs = [r for r in runs if r.data.tags.get("ragexp.role") != "sweep"]
    reasons: Counter = Counter()
    for job in jobs:
        table = client.load_table(job.info.experiment_id, "questions.json", run_ids=[job.info.run_id])
        assert len(table) == QUESTIONS
        assert set(table["status"]) <= {"judged", "failed"}
        failed = table[table["status"] == "failed"]
        assert (failed["failure_reason"].str.len() > 0).all()  # a failed question says why
        judged = table[table["status"] == "judged"]
        assert judged["context_relevance"].between(1, 10).all() and judged["faithfulness"].between(1, 10).all()
        reasons.update(re.sub(r"\d+", "N", reason)[:90] for reason in failed["failure_reason"])
        metrics = job.data.metrics
        assert metrics["total_questions"] == QUESTIONS
        assert metrics["failed_questions"] == len(failed)
    counted = sum(r["llm_requests"] + r["llm_retries"] for r in merged.values())
    assert seen == counted, (seen, {name: (r["llm_requests"], r["llm_retries"]) for name, r in merged.items()})
    summary = {name: {k: r[k] for k in ("total_questions", "failed_questions", "llm_requests", "llm_retries",
                                         "llm_failures", "judge_reasks", "judge_clamped_values")}
               for name, r in merged.items()}
    print(f"\nfault sweep: endpoint saw {seen} chat requests; injected {injected}; jobs {summary}; "
          f"failed by reason {dict(reasons)}")
