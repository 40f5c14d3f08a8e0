"""The console summary of a run: each aggregate with its status, the slices, the failures, the
notes and the quality gate's verdict."""
from __future__ import annotations

from ragexp.types import RunResult


def summary(result: RunResult) -> str:
    """A short table for the console: each aggregate, with good / ok / warning where the
    specification sets a target; the failures, the notes and the quality gate's verdict."""
    lines = [f"ragexp run {result.name!r}: scores by judge {result.judge!r}"]
    whole = {k: v for k, v in result.aggregates.items() if "/" not in k}
    width = max(len(k) for k in whole)
    for key, value in whole.items():
        shown = f"{value:d}" if isinstance(value, int) else f"{value:.4f}" if key.endswith("_usd") else f"{value:.3f}"
        lines.append(f"  {key:<{width}}  {shown:>8}  {result.statuses.get(key, '')}".rstrip())
    failures: dict[str, int] = {}
    for r in result.questions:
        if r.failed:
            failures[r.failure] = failures.get(r.failure, 0) + 1
    lines += [f"  failed ({count}): {reason}" for reason, count in failures.items()]
    lines += slices_summary(result)
    lines += [f"  note: {note}" for note in result.notes]
    if result.counters:
        lines.append("  work: " + ", ".join(f"{k}={v}" for k, v in sorted(result.counters.items())))
    if result.gate is not None:
        lines.append(f"gate {result.gate.name!r}: {'passed' if result.gate.passed else 'FAILED'}")
        lines += [f"  {check}" for check in result.gate.checks]
    return "\n".join(lines)


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
