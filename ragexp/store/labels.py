"""People's labels, read: the one reader of a labels file (python -m ragexp.calibrate, compare --labels,
a cascade's people) and the check of a label against its scale.

A labels file is CSV or JSONL, in one of two shapes:
- long: `question_id`, `metric`, `label` (and optionally `annotator`): one label a row;
- wide: `question_id` and one column per judge metric (and optionally `annotator`): the sheet that
  `--export` writes, filled in. Empty cells are labels not given.
Labels are on the judge's scale of that metric (1-10 for the single-call judge, 0-1 for the triad);
`hallucination` is labelled 1 / 0 (true / false, yes / no).
Every problem (an unknown question id, a label off the scale or not a number, a metric the run does
not have) is reported with file:line, all at once."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from ragexp.errors import RagexpError

INFO = ("question_id", "run", "annotator", "kind", "type", "question", "context", "expected_answer", "generated_answer",
        "metric", "label", "score_band", "notes")
MAX_SHOWN = 20


def listed(what: str, problems: list[str]) -> str:
    """One message for all the `problems` found in `what`, the first MAX_SHOWN of them a line each."""
    shown = problems[:MAX_SHOWN] + ([f"... and {len(problems) - MAX_SHOWN} more"] if len(problems) > MAX_SHOWN else [])
    return f"{what}: {len(problems)} problems:\n  " + "\n  ".join(shown)


@dataclass(frozen=True)
class Label:
    question_id: str
    metric: str
    annotator: str
    value: float
    run: str = ""  # the run it labels, when a file labels several (compare --labels)


def rows(path: Path):
    """(line number, dict) of each row of a CSV or JSONL file."""
    if path.suffix.lower() == ".jsonl":
        with path.open(encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as err:
                        raise RagexpError(f"{path}:{number}: not valid JSON ({err.msg})") from None
                    if not isinstance(row, dict):
                        raise RagexpError(f"{path}:{number}: expected a JSON object")
                    yield number, row
        return
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        for row in reader:
            yield reader.line_num, row


@dataclass(frozen=True)
class Labelled:
    """What a labels file may label: one run's questions, and its judge's metrics on their scales.
    `judge`: how a message names that judge; `names`: what a `run` column may call the run (its id,
    the id's first 8 characters, its name; none: a `run` column is not read)."""

    key: str
    name: str
    questions: frozenset[str]
    scales: dict[str, tuple[float, float]]
    judge: str
    names: tuple[str, ...] = ()


def from_file(path: str | Path, targets: list[Labelled], what: str = "labels") -> list[Label]:
    """The one reader of a labels file (calibrate, compare --labels, a cascade's people): every label
    of the `targets`' questions on their scales, each a `Label` of its target's run (`key`); a row
    naming no run labels every target's question. Every problem (an unknown run, question or metric,
    a label off its scale or not a number) is reported with file:line, all at once."""
    path = Path(path)
    if not path.is_file():
        raise RagexpError(f"{what}: {path} is not a file (give a CSV or JSONL file of labels)")
    if path.suffix.lower() not in (".csv", ".jsonl"):
        raise RagexpError(f"{what}: {path} must end in .csv or .jsonl")
    by_name: dict[str, list[Labelled]] = {}
    for target in targets:
        for name in dict.fromkeys(target.names):
            by_name.setdefault(name, []).append(target)
    labels, problems = [], []
    for number, row in rows(path):
        where = f"{path}:{number}"
        qid = str(row.get("question_id") or "").strip()
        annotator = str(row.get("annotator") or "").strip() or "annotator"
        if "metric" in row and "label" in row:
            given = [(str(row.get("metric") or "").strip(), row.get("label"))]
        else:
            given = [(column, value) for column, value in row.items() if column not in INFO and column is not None]
        given = [(m, v) for m, v in given if v is not None and str(v).strip() != ""]
        if not given:
            continue  # a sheet row nobody filled in
        if not qid:
            problems.append(f"{where}: no question_id")
            continue
        name = str(row.get("run") or "").strip() if by_name else ""
        chosen = by_name.get(name, []) if name else targets
        if name and len(chosen) != 1:
            problems.append(f"{where}: run {name!r} is " + ("not one of the compared runs" if not chosen
                                                            else "the name of several runs: give its id"))
            continue
        for target in chosen:
            if qid not in target.questions:
                problems.append(f"{where}: question {qid!r} is not in run {target.name}")
                continue
            for metric, value in given:
                if metric not in target.scales:
                    problems.append(f"{where}: metric {metric!r} is not a metric of {target.judge} "
                                    f"({', '.join(target.scales)})")
                    continue
                try:
                    labels.append(Label(qid, metric, annotator, on_scale(value, metric, target.scales[metric]), target.key))
                except ValueError as err:
                    problems.append(f"{where}: {err}")
    if problems:
        raise RagexpError(listed(what, problems))
    if not labels:
        raise RagexpError(f"{what}: {path} holds no label (fill in the metric columns of the sheet)")
    return labels


def means(labels: list[Label]) -> dict[str, dict[str, dict[str, float]]]:
    """run -> metric -> question id -> the label (the mean over annotators)."""
    given: dict[str, dict[str, dict[str, list[float]]]] = {}
    for label in labels:
        given.setdefault(label.run, {}).setdefault(label.metric, {}).setdefault(label.question_id, []).append(label.value)
    return {run: {metric: {q: sum(v) / len(v) for q, v in by_question.items()} for metric, by_question in metrics.items()}
            for run, metrics in given.items()}


YES, NO = {"true", "yes", "y"}, {"false", "no", "n"}


def label_value(value) -> float:
    """A label as a number: numbers as they are, true / yes as 1 and false / no as 0 (a yes/no label
    such as `hallucination`); raises ValueError otherwise."""
    if isinstance(value, bool):
        return float(value)
    text = str(value).strip().lower()
    if text in YES or text in NO:
        return float(text in YES)
    return float(text)


def on_scale(value, metric: str, scale: tuple[float, float]) -> float:
    """A label of `metric` as a number on the judge's `scale`; ValueError saying why it is not one."""
    try:
        number = label_value(value)
    except (TypeError, ValueError):
        raise ValueError(f"{metric} label {value!r} is not a number") from None
    lo, hi = scale
    if not math.isfinite(number) or not lo <= number <= hi:
        raise ValueError(f"{metric} label {value} is off the judge's scale {lo:g}-{hi:g}")
    return number
