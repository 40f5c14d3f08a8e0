"""A gated run's thresholds as MLflow's quality criteria: the run tag `mlflow.genaiEvaluate.qualityCriteria`
that `mlflow.genai.evaluate(quality_criteria=...)` writes (MLflow 3.18), made from the rules that map and
equal to what MLflow's own builder makes of them (tests/test_contracts.py); what does not map is listed
in the tag `ragexp.gate.not_in_quality_criteria`, each with why.

A threshold maps when it bounds (`>=` / `<=`) the mean of a score ragexp logs on each question's trace
as feedback (a judge metric, `hallucination`, an answer metric): `gate.thresholds.faithfulness.min=9`
is the rule `faithfulness/mean >= 9`. The run also gets the metric each rule names
(`faithfulness/mean`, as `mlflow.genai.evaluate` logs a scorer's mean), equal to ragexp's aggregate
(`avg_faithfulness`). A bound written on another scale is written on the run's own (the number the
gate compared), the conversion listed. What does not map: the regression against a baseline (paired,
one-sided, Holm across metrics, with a margin), a threshold on what is not a per-question score on the
traces (overall_score, retrieval metrics), and one the run did not compute. No MLflow import here."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

QUALITY_CRITERIA = "mlflow.genaiEvaluate.qualityCriteria"  # the run tag (mlflow.utils.mlflow_tags, 3.18)
NOT_MAPPED = "ragexp.gate.not_in_quality_criteria"
SCHEMA_VERSION = 1  # of the tag's JSON, as MLflow 3.18 writes it
COMPARATORS = {">=": "GTE", "<=": "LTE"}
MAX_TAG = 8000  # MLflow's longest tag value (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)


@dataclass(frozen=True)
class Rule:
    """`<scorer>/<aggregation> <comparator> <threshold>`: a bound on a metric of the run, as MLflow keys it."""

    scorer: str  # the feedback's name on each question's trace
    comparator: str  # ">=" or "<="
    threshold: float  # on the run's own scale
    aggregation: str = "mean"

    @property
    def metric_key(self) -> str:
        return f"{self.scorer}/{self.aggregation}"

    def to_json(self) -> dict:
        return {"metricKey": self.metric_key, "comparator": COMPARATORS[self.comparator], "threshold": self.threshold}

    def condition(self) -> str:
        """The rule in the syntax of `mlflow.genai.evaluate(quality_criteria=...)`."""
        name = self.scorer if self.aggregation == "mean" else self.metric_key
        return f"`{name}` {self.comparator} {self.threshold!r}"


@dataclass(frozen=True)
class Criteria:
    rules: tuple[Rule, ...]
    not_mapped: tuple[str, ...]  # one line each: what the gate checks that the rules do not say

    def expression(self) -> str:
        """The rules as `quality_criteria` is written: conditions joined by AND."""
        return " AND ".join(rule.condition() for rule in self.rules)

    def tags(self, revision: str) -> dict[str, str]:
        """The run's tags: MLflow's (when a rule maps) and ragexp's list of what does not map (when any)."""
        tags = {}
        if self.rules:
            value = json.dumps({"schemaVersion": SCHEMA_VERSION, "revision": revision,
                                "rules": [rule.to_json() for rule in self.rules]}, separators=(",", ":"))
            if len(value) <= MAX_TAG:
                tags[QUALITY_CRITERIA] = value
        if self.not_mapped:
            tags[NOT_MAPPED] = "; ".join(self.not_mapped)[:MAX_TAG]
        return tags


def gate_criteria(gate: dict, aggregates: list[dict], values: dict, scales: dict | None,
                  feedback: set[str]) -> Criteria:
    """The gate's settings as config.yaml holds them (`gate`), the run's aggregation spec
    (aggregates.json), its aggregates (results.json), their scales (run.json; None when the folder
    does not say) and the names of the scores on its traces (`feedback`), as Criteria."""
    from ragexp.base.names import MetricName

    means = {a["name"]: a["inputs"][0] for a in aggregates
             if a.get("kind") == "mean" and len(a.get("inputs") or ()) == 1 and not a.get("where")}
    rules, not_mapped = [], []
    for name, spec in (gate.get("thresholds") or {}).items():
        metric = MetricName.parse(str(name))  # as ragexp.metrics.gate reads a threshold
        key = next((k for k in (metric.key, f"avg_{metric.key}") if k in values), None)
        if key is None:
            not_mapped.append(f"{metric}: not computed in this run")
            continue
        scorer = means.get(key)
        if scorer is None or scorer not in feedback:
            not_mapped.append(f"{metric}: {key} is not the mean of a score on each question's trace")
            continue
        written, scale = spec.get("scale"), (scales or {}).get(key)
        if written and scales is None:
            not_mapped.append(f"{metric}: written on [{written[0]:g}, {written[1]:g}], and the run folder does not say "
                              "the run's scale")
            continue
        for op, bound in ((">=", spec.get("min")), ("<=", spec.get("max"))):
            if bound is None:
                continue
            mapped = on_scale(float(bound), written, scale)
            rules.append(Rule(scorer, op, mapped))
            if mapped != bound:
                not_mapped.append(f"{metric} {op} {bound:g} on [{written[0]:g}, {written[1]:g}]: the rule says "  # type: ignore[index]
                                  f"{mapped:g}, on the run's scale [{scale[0]:g}, {scale[1]:g}]")  # type: ignore[index]
    if gate.get("baseline"):
        margin = gate.get("margin") or 0
        not_mapped.append(f"regression against {gate['baseline']}: paired on the shared questions, one-sided at alpha "
                          f"{gate.get('alpha', 0.05):g}, Holm across the metrics, margin {json.dumps(margin)}")
    merged: dict[str, Rule] = {}
    for rule in rules:  # MLflow takes one condition per metric: both bounds of one metric cannot be said
        if rule.metric_key in merged:
            not_mapped.append(f"{rule.scorer}: a second bound ({rule.comparator} {rule.threshold:g}); MLflow takes one "
                              "condition per metric")
            continue
        merged[rule.metric_key] = rule
    return Criteria(tuple(merged.values()), tuple(not_mapped))


def on_scale(bound: float, written: list | None, scale: list | tuple | None) -> float:
    """A bound written on the scale `written` mapped linearly onto the run's `scale`, as the gate maps it
    (ragexp.metrics.gate.Threshold.on_scale; tests/test_quality_criteria.py holds the two equal)."""
    if not written or not scale or list(written) == list(scale):
        return bound
    (lo, hi), (to_lo, to_hi) = written, scale
    return round(to_lo + (bound - lo) / (hi - lo) * (to_hi - to_lo), 10)


def feedback_names(folder: Path, feedback: str = "main") -> set[str]:
    """The scores a run folder's questions put on each question's trace as feedback (`tracker.feedback`:
    ragexp.store.trace_store.scores_on_traces)."""
    from ragexp.store.trace_store import scores_on_traces

    questions = folder / "questions.jsonl"
    names: set[str] = set()
    if not questions.is_file():
        return names
    only, answer_metrics = scores_on_traces(folder, feedback)
    with questions.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            record = json.loads(line)
            names.update(record.get("judge_scores") or {})
            names.update((record.get("answer_metrics") or {}) if answer_metrics else {})
            if record.get("hallucination") is not None:
                names.add("hallucination")
    return names if only is None else names & only


def folder_criteria(folder: Path, config: dict, values: dict, meta: dict, run_id: str,
                    feedback: str = "main") -> tuple[dict[str, str], dict[str, float]]:
    """A run folder's quality-criteria tags and the metrics its rules name (`<scorer>/mean`: the
    aggregate ragexp computed); nothing for a run without thresholds or a baseline."""
    gate = config.get("gate") or {}
    if not (gate.get("thresholds") or gate.get("baseline")):
        return {}, {}
    from ragexp.store.run_folder import AGGREGATES

    path = folder / AGGREGATES
    aggregates = json.loads(path.read_text())["aggregates"] if path.is_file() else []
    criteria = gate_criteria(gate, aggregates, values, meta.get("scales"), feedback_names(folder, feedback))
    means = {a["inputs"][0]: a["name"] for a in aggregates if a.get("kind") == "mean" and len(a.get("inputs") or ()) == 1
             and not a.get("where")}
    metrics = {rule.metric_key: float(values[means[rule.scorer]]) for rule in criteria.rules}
    return criteria.tags(str(uuid.uuid5(uuid.NAMESPACE_URL, f"ragexp:{run_id}"))), metrics
