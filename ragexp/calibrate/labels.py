"""The annotation sheet that asks people for labels of a judged run (a stratified sample), and the
labels read back for it (the reader: ragexp.store.labels)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from ragexp.calibrate.source import JudgedRun
from ragexp.store.labels import Label, Labelled, from_file


def read(path: str | Path, run: JudgedRun) -> list[Label]:
    """`calibrate --labels FILE`: the labels of the run's questions (`from_file`)."""
    return from_file(path, [Labelled(run.run_id or "", run.name, frozenset(run.table["question_id"].astype(str)),
                                     run.scales, f"judge {run.judge!r}")])


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
        wanted = set(chosen or ())
        for i in stratified_sample(run, size, seed) if chosen is None else \
                [i for i, q in enumerate(table["question_id"].astype(str)) if q in wanted]:
            row = table.iloc[i]
            chunks = json.loads(row["retrieved_chunks"]) if isinstance(row.get("retrieved_chunks"), str) else []
            context = "\n\n".join(f"[Doc {n}] {text}" for n, text in enumerate(chunks, start=1))
            writer.writerow([row["question_id"], "", row.get(run.kind_column, "") if run.kind_column else "", bands[i],
                             row.get("question", ""), context, row.get("expected_answer", ""),
                             row.get("generated_answer", ""), *[""] * len(metrics)])
    return path
