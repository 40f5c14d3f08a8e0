"""`python -m ragexp.compare --labels FILE`: each configuration's judge means corrected by human
labels on part of its questions (prediction-powered inference, see `ragexp.stats.ppi`),
beside the judge-only means.

The labels file is CSV or JSONL, as `python -m ragexp.calibrate` reads (long: `question_id`,
`metric`, `label`; or wide: `question_id` and one column per metric; optionally `annotator`),
with a `run` column naming the run a label belongs to (its name, its id or the id's first 8
characters): people label an answer, and each configuration has its own answers. A row without a
`run` applies to every compared run, which is right only when they gave the same answers (a sweep
over judges or weights). Metrics: the judge's scores on its scale, and `hallucination` (1/0,
true/false, yes/no)."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ragexp.store.labels import Labelled, from_file, listed, means
from ragexp.stats.ppi import MeanEstimate, estimates
from ragexp.store.reader import Run
from ragexp.errors import RagexpError
from ragexp.calibrate.source import judge_scales, score_column


@dataclass(frozen=True)
class CorrectedMean:
    run: Run
    metric: str
    judge: MeanEstimate
    corrected: MeanEstimate | None  # None: fewer than 2 labelled questions

    def to_json(self) -> dict:
        return {"run_id": self.run.run_id, "label": self.run.name, "metric": self.metric,
                "judge_only": self.judge.to_json(), "corrected": self.corrected.to_json() if self.corrected else None}


def run_scales(run: Run) -> dict[str, tuple[float, float]]:
    """The judge metrics' scales (from the run's `judge._target_`), and hallucination on 0-1."""
    scorers = run.params.get("judge.scorers")  # judge=mlflow: its metrics are the scorers it names (a JSON list)
    cheap = run.params.get("judge.cheap._target_")  # judge=cascade: its cheap judge's
    config = {"judge": {"scorers": json.loads(scorers)}} if scorers else \
        {"judge": {"cheap": {"_target_": cheap}}} if cheap else None
    scales = judge_scales(run.params.get("judge._target_"), f"run {run.name} ({run.run_id[:8]})", config)
    return {**scales, "hallucination": (0.0, 1.0)}


def judge_scores(run: Run, metric: str) -> dict[str, float]:
    """question id -> the judge's score of `metric` (hallucination: 1/0), judged questions only."""
    table = run.table
    if table is None:
        return {}
    metric = score_column(table, metric)  # judge=cascade: its cheap judge's
    if metric not in table:
        return {}
    judged = table[table["status"] == "judged"] if "status" in table else table
    scores = {}
    for qid, value in zip(judged["question_id"], judged[metric]):
        try:
            score = float(value)
        except (TypeError, ValueError):
            continue  # no score (None, a failed question's empty cell)
        if not math.isnan(score):
            scores[str(qid)] = score
    return scores


FROM_MLFLOW = "mlflow"  # --labels-from mlflow


def people(labels: str | Path, runs: list[Run]) -> dict[str, dict[str, dict[str, float]]]:
    """run id -> metric -> question id -> people's label (the mean over annotators): from the file
    `labels`, or with `FROM_MLFLOW` from the answers people gave in MLflow's Review tab on each run's
    question traces (ragexp.calibrate.review)."""
    return from_mlflow(runs) if str(labels) == FROM_MLFLOW else read(labels, runs)


def from_mlflow(runs: list[Run]) -> dict[str, dict[str, dict[str, float]]]:
    from ragexp.store.reviews import human_labels

    found, problems = [], []
    for run in runs:
        questions = set(run.table["question_id"].astype(str)) if run.table is not None else set()
        labels, trouble = human_labels(run.run_id, run.experiment_id, run_scales(run), questions)
        problems += [f"run {run.name}: {line}" for line in trouble]
        found += labels
    if problems:
        raise RagexpError(listed("--labels-from mlflow", problems))
    if not found:
        raise RagexpError("--labels-from mlflow: no person has labelled these runs' questions in MLflow yet "
                          "(python -m ragexp.calibrate RUN_ID --export N --to mlflow puts a run's up for review)")
    return means(found)


def read(path: str | Path, runs: list[Run]) -> dict[str, dict[str, dict[str, float]]]:
    """run id -> metric -> question id -> people's label (the mean over annotators), from the file
    `path` (ragexp.store.labels.from_file: every problem reported with file:line, all at once)."""
    targets = [Labelled(run.run_id, run.name, frozenset(run.table["question_id"].astype(str)) if run.table is not None
                        else frozenset(), run_scales(run), f"run {run.name}'s judge", (run.run_id, run.run_id[:8], run.name))
               for run in runs]
    return means(from_file(path, targets, "--labels"))


def measure(runs: list[Run], labels: dict[str, dict[str, dict[str, float]]], level: float = 0.95) -> list[CorrectedMean]:
    """Per run (in the given order) and labelled metric: the judge-only and the corrected mean."""
    found = []
    for run in runs:
        scales = run_scales(run)
        for metric, people in labels.get(run.run_id, {}).items():
            scores = judge_scores(run, metric)
            if scores:
                judge, corrected = estimates(scores, people, level, scales[metric])
                found.append(CorrectedMean(run, metric, judge, corrected))
    return found
