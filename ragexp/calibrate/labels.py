"""Human labels: read, checked against the judged run, and the annotation sheet that asks for them.

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

import numpy as np

from ragexp.calibrate.source import JudgedRun
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


def read(path: str | Path, run: JudgedRun) -> list[Label]:
    """`calibrate --labels FILE`: the labels of the run's questions (`from_file`)."""
    return from_file(path, [Labelled(run.run_id or "", run.name, frozenset(run.table["question_id"].astype(str)),
                                     run.scales, f"judge {run.judge!r}")])


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


def band(value: float, scale: tuple[float, float]) -> str:
    """low / mid / high third of the scale: the score stratum of the sheet."""
    lo, hi = scale
    share = (value - lo) / (hi - lo) if hi > lo else 0.0
    return "low" if share < 1 / 3 else "mid" if share < 2 / 3 else "high"


def judge_share(run: JudgedRun, table) -> np.ndarray:
    """Each question's judge scores, each mapped onto 0-1 by its scale, averaged: its score range."""
    shares = [(table[m].astype(float) - lo) / (hi - lo) for m, (lo, hi) in run.scales.items()
              if m in table and hi > lo and m != "hallucination"]
    return np.mean(shares, axis=0) if shares else np.zeros(len(table))


def stratified_sample(run: JudgedRun, size: int, seed: int = 0) -> list[int]:
    """Row positions of `size` judged questions spread over strata (question type x score band: the
    low, middle or high third of the judge's scores averaged over its metrics on 0-1), each stratum in
    proportion to its size and at least one where possible."""
    table = run.judged().reset_index(drop=True)
    kinds = table[run.kind_column].astype(str) if run.kind_column else ["all"] * len(table)
    bands = [band(share, (0.0, 1.0)) for share in judge_share(run, table)]
    strata: dict[tuple[str, str], list[int]] = {}
    for position, key in enumerate(zip(kinds, bands)):
        strata.setdefault(key, []).append(position)
    rng = np.random.default_rng(seed)
    size = min(size, len(table))
    quotas = {key: max(1, round(size * len(members) / len(table))) for key, members in strata.items()}
    while sum(quotas.values()) > size:  # rounding up every stratum can overshoot: trim the largest
        largest = max(quotas, key=lambda k: (quotas[k], k))
        quotas[largest] -= 1
    chosen: list[int] = []
    for key in sorted(strata):
        members = strata[key]
        chosen += [int(i) for i in rng.choice(members, size=min(quotas[key], len(members)), replace=False)]
    left = [i for i in range(len(table)) if i not in set(chosen)]
    if len(chosen) < size and left:
        chosen += [int(i) for i in rng.choice(left, size=size - len(chosen), replace=False)]
    return sorted(chosen)


def export(run: JudgedRun, size: int, path: str | Path, seed: int = 0, chosen: list[str] | None = None) -> Path:
    """A CSV sheet of a stratified sample (or of the questions `chosen`): what the judge saw and one
    empty column per metric."""
    table = run.judged().reset_index(drop=True)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics = run.metrics
    bands = [band(share, (0.0, 1.0)) for share in judge_share(run, table)]
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["question_id", "annotator", "kind", "score_band", "question", "context",
                         "expected_answer", "generated_answer", *metrics])
        ids = table["question_id"].astype(str)
        for i in stratified_sample(run, size, seed) if chosen is None else [i for i, q in enumerate(ids) if q in set(chosen)]:
            row = table.iloc[i]
            chunks = json.loads(row["retrieved_chunks"]) if isinstance(row.get("retrieved_chunks"), str) else []
            context = "\n\n".join(f"[Doc {n}] {text}" for n, text in enumerate(chunks, start=1))
            writer.writerow([row["question_id"], "", row.get(run.kind_column, "") if run.kind_column else "", bands[i],
                             row.get("question", ""), context, row.get("expected_answer", ""),
                             row.get("generated_answer", ""), *[""] * len(metrics)])
    return path
