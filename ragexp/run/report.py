"""The console summary of a run: each aggregate with its status, the slices, the failures, the
notes and the quality gate's verdict."""
from __future__ import annotations

from ragexp.metrics.scoring import count_name
from ragexp.types import RunResult
from ragexp.metrics.targets import BY_CONSTRUCTION


def summary(result: RunResult) -> str:
    """A short table for the console: each aggregate, with good / ok / warning where the
    specification sets a target (`by construction` where the configuration fixes it); the failures,
    the notes and the quality gate's verdict."""
    lines = [f"ragexp run {result.name!r}: scores by judge {result.judge!r} (good / ok / warning: against each "
             "metric's target" + (f"; gate {result.gate.name!r}: its own thresholds" if result.gate is not None else "") + ")"]
    gated = gate_marks(result)
    whole = {k: v for k, v in result.aggregates.items() if "/" not in k}
    counts = {count_name(k) for k in whole} & set(whole)  # n_<metric>: the questions a metric was computed over
    width = max(len(k) for k in whole)
    total = whole.get("total_questions")
    for key, value in whole.items():
        if key in counts:  # shown beside its metric
            continue
        shown = f"{value:d}" if isinstance(value, int) else f"{value:.4f}" if key.endswith("_usd") else f"{value:.3f}"
        over = f"over {whole[count_name(key)]} of {total} questions" if count_name(key) in counts else ""
        lines.append(f"  {key:<{width}}  {shown:>8}  {result.statuses.get(key, '')}  {gated.get(key, '')}  {over}".rstrip())
    failures: dict[str, int] = {}
    unjudged: dict[str, int] = {}  # a judged question's metrics that failed (a reply unreadable after its re-ask)
    for r in result.questions:
        if r.failed:
            failures[r.failure] = failures.get(r.failure, 0) + 1
        for metric, reason in ((r.judgement.details.get("failed_criteria") or {}) if r.judgement else {}).items():
            unjudged[f"{metric}: {reason}"] = unjudged.get(f"{metric}: {reason}", 0) + 1
    constructed = [key for key, status in result.statuses.items() if status == BY_CONSTRUCTION]
    if constructed:
        lines.append(f"  by construction: {', '.join(constructed)} hold for this configuration whatever its "
                     "quality (declared by its components); they are not rated against their targets")
    lines += [f"  failed ({count}): {reason}" for reason, count in failures.items()]
    lines += [f"  metric failed, left out of its mean ({count}): {reason}" for reason, count in unjudged.items()]
    lines += slices_summary(result)
    lines += [f"  note: {note}" for note in result.notes]
    if result.counters:
        lines.append("  work: " + ", ".join(f"{k}={v}" for k, v in sorted(result.counters.items())))
    if result.gate is not None:
        lines.append(f"gate {result.gate.name!r}: {'passed' if result.gate.passed else 'FAILED'} (it decides the exit status)")
        lines += [f"  {check}" for check in result.gate.checks]
    else:
        warned = result.warned
        verdict = (f"{len(warned)} rated warning against their targets ({', '.join(warned)}): ragexp.evaluate's "
                   "`passed` is False" if warned else "no metric rated warning against its target: ragexp.evaluate's "
                   "`passed` is True")
        lines.append(f"no gate set: {verdict}; the exit status does not depend on the targets: set gate=production "
                     "or your own thresholds for that")
    return "\n".join(lines)


def gate_marks(result: RunResult) -> dict[str, str]:
    """aggregate -> the gate's check of it, as shown beside its target mark (`gate >= 0.8 FAILED`),
    so that a metric rated `good` against its target but failing the gate says both."""
    if result.gate is None:
        return {}
    marks: dict[str, list[str]] = {}
    for check in result.gate.checks:  # "mrr = 0.4120 [95% CI 0.3, 0.5] >= 0.8: FAILED"
        key, equals, rest = check.partition(" = ")
        if equals:
            condition, _, outcome = rest.partition(" ")[2].rpartition(": ")
            condition = condition.partition("] ")[2] if condition.startswith("[95% CI") else condition
            marks.setdefault(key, []).append(f"{condition.split(' (')[0]} {outcome}")
    return {key: "gate " + ", ".join(parts) for key, parts in marks.items()}


def slices_summary(result: RunResult) -> list[str]:
    """Per slice of the questions (`kind/procedural`, `source/synthetic`): its size, overall score and
    judge averages, one line each."""
    slices: dict[str, dict[str, float]] = {}
    for key, value in result.aggregates.items():
        if "/" in key:
            name, column, value_name = key.split("/", 2)
            slices.setdefault(f"{column}={value_name}", {})[name] = value
    if not slices:
        return []
    width = max(len(s) for s in slices)
    lines = ["  per slice:"]
    for label, values in slices.items():
        shown = [f"{int(values.get('total_questions', 0))} questions"]
        shown += [f"{k} {v:.3f}" for k, v in values.items() if k == "overall_score" or (k.startswith("avg_") and k in
                  {f"avg_{m}" for m in ("context_relevance", "answer_similarity", "faithfulness", "answer_relevance")})]
        lines.append(f"    {label:<{width}}  " + ", ".join(shown))
    return lines
