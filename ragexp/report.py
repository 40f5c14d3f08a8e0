"""What a run leaves behind: results.json, aggregates.json, the per-question table, the console summary."""
from __future__ import annotations

import json
from pathlib import Path

from ragexp.types import RunResult

AGGREGATES = "aggregates.json"


def results_json(result: RunResult) -> dict:
    """The specification's example shape: {"<run name>": {aggregates..., "judge": ...}}."""
    return {result.name: {**result.aggregates, "judge": result.judge}}


def aggregates_json(result: RunResult) -> dict:
    """How each aggregate of results.json is made from the per-question table (see
    ragexp.scoring.Aggregate); `python -m ragexp.compare` reads it to recompute them."""
    return {"run": result.name, "aggregates": [a.to_json() for a in result.aggregation]}


def write_results(result: RunResult, folder: Path) -> Path:
    """results.json, and aggregates.json beside it; returns the path of results.json."""
    path = folder / "results.json"
    path.write_text(json.dumps(results_json(result), indent=2) + "\n")
    (folder / AGGREGATES).write_text(json.dumps(aggregates_json(result), indent=2) + "\n")
    return path


def question_table(result: RunResult) -> dict[str, list]:
    """One row per question (column -> values), for `mlflow.log_table`."""
    from ragexp.metrics.names import metric_key

    rows = []
    metrics = list(dict.fromkeys(m for r in result.questions if r.judgement for m in r.judgement.scores))
    details = list(dict.fromkeys(k for r in result.questions if r.judgement for k in r.judgement.details))
    answer_metrics = list(dict.fromkeys(m for r in result.questions for m in r.generation))
    retrieval = list(dict.fromkeys(m for r in result.questions for m in r.retrieval))
    for r in result.questions:
        j = r.judgement
        rows.append({
            "question_id": r.question.qid,
            "question": r.question.text,
            "kind": r.question.kind,
            "source": r.question.source,
            "expected_answer": r.question.expected,
            "generated_answer": r.answer.text if r.answer else "",
            "golden_doc_ids": json.dumps(sorted(r.question.golden)),
            "retrieved_chunk_ids": json.dumps([h.chunk.chunk_id for h in r.hits]),
            "retrieved_chunks": json.dumps([h.chunk.text for h in r.hits]),
            "judge": result.judge,
            **{metric: (j.scores.get(metric) if j else None) for metric in metrics},
            "hallucination": j.hallucination if j else None,
            "reasoning": j.reasoning if j else "",
            **{key: cell(j.details.get(key)) if j else None for key in details},
            **{metric: r.generation.get(metric) for metric in answer_metrics},
            **{metric_key(name): r.retrieval.get(name) for name in retrieval},
            "retrieval_excluded": r.retrieval_excluded,
            "status": "failed" if r.failed else "judged",
            "failure_reason": r.failure,
        })
    return {column: [row[column] for row in rows] for column in rows[0]} if rows else {}


def cell(value):
    """A judge's detail as a table cell: lists and objects as JSON text."""
    return json.dumps(value) if isinstance(value, (list, dict, tuple)) else value


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
