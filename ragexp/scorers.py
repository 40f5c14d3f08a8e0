"""ragexp's judges as MLflow scorers, so that `mlflow.genai.evaluate` scores with them.

    import mlflow
    from ragexp.scorers import judge_scorers

    mlflow.genai.evaluate(data=rows, scorers=judge_scorers("offline"))

One scorer per metric of the judge (and `hallucination`), named as ragexp names the metric, each
giving ragexp's per-question value with the judge's reasoning as its rationale. A row is read as
`dataset=outputs dataset.preset=mlflow` reads it: `inputs` the question, `outputs` the answer (text,
or an object with the answer and `retrieved_contexts`), `expectations.expected_response` the
reference. The judge is judged once per row, whatever number of its scorers MLflow calls. The judge
and its settings come from ragexp's config (`judge=` an option, `overrides` as on the command line,
e.g. ["embedder@scoring_embedder=hash"]); an LLM judge asks its endpoint as in a run.
"""
from __future__ import annotations

import json
from typing import Any, Sequence


def judge_scorers(judge: str = "offline", overrides: Sequence[str] = ()) -> list:
    """The MLflow scorers of ragexp's `judge` option (see the module's docstring)."""
    from mlflow.entities import Feedback
    from mlflow.genai.scorers import scorer

    from ragexp.config.build import build, from_yaml
    from ragexp.config.compose import compose
    from ragexp.config.validation import validate

    cfg, _ = compose([f"judge={judge}", *overrides])
    validate(cfg)  # every setting checked, prompts:/... read from the registry, as for a run
    built = build(cfg.judge)
    if built.endpoint is not None:  # an LLM judge asks through ragexp's session, as in a run
        session = build(cfg.llm)
        session.connect(**built.roles())
    judged: dict[str, Any] = {}
    reader = from_yaml("dataset/outputs", preset="mlflow")  # a row of mlflow.genai.evaluate, as dataset=outputs reads it

    def judgement(inputs: Any, outputs: Any, expectations: Any):
        row = {"inputs": inputs, "outputs": outputs, "expectations": expectations or {}, "id": "row"}
        key = json.dumps(row, sort_keys=True, default=str)
        if key not in judged:
            question, output = reader.parse(row, "mlflow.genai.evaluate row", 1)
            judged[key] = built.judge(question, output.hits, output.answer)
        return judged[key]

    def metric_scorer(metric: str):
        def score(inputs=None, outputs=None, expectations=None) -> Feedback:
            j = judgement(inputs, outputs, expectations)
            value = j.hallucination if metric == "hallucination" else j.scores.get(metric)
            return Feedback(value=value, rationale=j.reasoning)
        return scorer(score, name=metric)

    metrics = [*built.metrics, *(["hallucination"] if built.flags_hallucination else [])]
    return [metric_scorer(m) for m in metrics]
