"""`python -m ragexp.calibrate --outputs FILE`: calibrate a judge on labelled recorded outputs.

FILE is a recorded-outputs file (the format of `dataset=outputs`: one row per question, JSONL or
CSV; columns `question`, `contexts`, `answer`, `reference`, `golden_docs`, `answerable`, `id`, or
ragas' `user_input`, `retrieved_contexts`, `response`) with people's labels as further columns:
a column named after a judge metric (on the judge's scale) or `hallucination` (yes/no, 1/0), or
any other yes/no column (e.g. `supported`). The configured judge (Hydra overrides such as
`judge=llm`, as for `python -m ragexp`) judges every row through the stage cache and the LLM
session; the judged rows are then a run like any other for `agreement`, and each yes/no label gets
the threshold analysis of `thresholds`.

The file is read by the `dataset=outputs` loader (`ragexp.datasets.outputs.OutputsDataset`), so
both accept the same files (its `dataset.columns.*`, `dataset.preset`, `dataset.on_error` settings
too) and name a bad row the same way (file:line); the labels are the row's other columns."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ragexp.store.labels import Label, label_value
from ragexp.calibrate.source import JudgedRun
from ragexp.config.compose import compose as compose_config
from ragexp.errors import RagexpError
from ragexp.types import Answer, Hit, Judgement, Output, Question, QuestionResult
from ragexp.datasets.outputs import OutputsDataset
from ragexp.judges.judging import judged_results
from ragexp.run.work import Work

# the loader keeps every other scalar column with the question: these are not labels
NOT_LABELS = {"annotator", "part", "set", "group"}
YES_NO = {"true", "false", "yes", "no", "y", "n", "1", "0", "1.0", "0.0"}


@dataclass(frozen=True)
class LabelledRow:
    """One recorded output as the loader read it: where its row is (file:line), the question, the
    output the judge sees, and the row's other columns (the labels among them)."""

    where: str
    question: Question
    output: Output

    @property
    def hits(self) -> tuple[Hit, ...]:
        return self.output.hits

    @property
    def answer(self) -> Answer:
        return self.output.answer or Answer("")  # a retrieval-only row: judged as an empty answer

    @property
    def extra(self) -> dict[str, str]:
        return {k: v for k, v in self.question.attributes.items() if k not in NOT_LABELS}


def labelled_rows(path: str | Path, cfg) -> tuple[list[LabelledRow], list[str]]:
    """The rows of the recorded-outputs file at `path`, read by the `dataset=outputs` loader with the
    composed `cfg.dataset` settings (columns, preset, on_error, limit); and the rows it skipped."""
    from ragexp.config.build import build

    cfg.dataset.path = str(path)
    loader = build(cfg.dataset)
    if not isinstance(loader, OutputsDataset):
        raise RagexpError(f"--outputs reads recorded outputs (dataset=outputs), not dataset {cfg.dataset._target_}")
    dataset = loader.load()
    rows = [LabelledRow(loader.places[q.qid], q, dataset.outputs[q.qid]) for q in dataset.questions]
    if not rows:
        raise RagexpError(f"--outputs: {path} holds no row" + (f" ({len(dataset.skipped_rows)} skipped)"
                                                                if dataset.skipped_rows else ""))
    return rows, list(dataset.skipped_rows)


def compose(overrides: Sequence[str]):
    """The packaged config with `dataset=outputs` and `overrides` (as `python -m ragexp` composes it)."""
    try:
        cfg, _ = compose_config(["dataset=outputs", *overrides])
    except RagexpError as err:
        raise RagexpError(f"overrides: {err}") from None
    return cfg


def groups_of(rows: Sequence[LabelledRow], column: str) -> dict[str, str]:
    """Question id -> the row's value of `column` (`--group`), every row having one."""
    missing = [row.where for row in rows if str(row.extra.get(column) or "").strip() == ""]
    if missing:
        known = sorted({c for row in rows for c in row.extra})
        raise RagexpError(f"--group {column}: {len(missing)} of {len(rows)} rows have no {column!r} (first: {missing[0]}); "
                          f"the extra columns: {', '.join(known) or 'none'}")
    return {row.question.qid: str(row.extra[column]) for row in rows}


def judge_rows(rows: Sequence[LabelledRow], cfg) -> tuple[Any, list[Judgement | str]]:
    """The configured judge, and its judgement of each row (or why the row failed: an endpoint
    error, an unreadable reply), through the stage cache and the LLM session as in a run."""
    from ragexp.config.build import build, settings

    work = Work(build(cfg.cache))
    with work.embeddings.building():
        judge = build(cfg.judge)
    llm = build(cfg.llm)
    answered = [QuestionResult(row.question, row.hits, answer=row.answer) for row in rows]
    try:
        llm.connect(**judge.roles())
        judged, _ = judged_results(judge, answered, work, settings(cfg.judge), "judging outputs")
        return judge, [r.judgement if r.judgement is not None else r.failure for r in judged]
    finally:
        llm.close()


def as_run(name: str, judge, rows: Sequence[LabelledRow], judged: Sequence[Judgement | str]) -> JudgedRun:
    """The judged rows as a run's per-question table, for ragexp.calibrate.agreement."""
    import pandas as pd

    records = []
    for row, j in zip(rows, judged):
        ok = isinstance(j, Judgement)
        scores = j.scores if isinstance(j, Judgement) else {}
        records.append({
            "question_id": row.question.qid, "question": row.question.text, "kind": row.question.kind,
            "expected_answer": row.question.expected, "generated_answer": row.answer.text,
            "retrieved_chunks": json.dumps([h.chunk.text for h in row.hits]), "judge": judge.name,
            **{m: scores.get(m) for m in judge.metrics},
            "hallucination": float(j.hallucination) if isinstance(j, Judgement) and j.hallucination is not None else None,
            "status": "judged" if ok else "failed", "failure_reason": j if isinstance(j, str) else ""})
    scales = {m: (float(lo), float(hi)) for m, (lo, hi) in judge.scales.items()}
    return JudgedRun(name, judge.name, pd.DataFrame(records), {**scales, "hallucination": (0.0, 1.0)})


def write_judged(run: JudgedRun, judge, folder: Path) -> None:
    """The judged rows as a run folder: `questions.json` (the per-question table, as a run writes
    it) and `config.yaml` naming the judge's class, so `python -m ragexp.calibrate FOLDER --labels
    ...` (or a PPI estimate from a part of the labels) reads them without judging again."""
    table = run.table.astype(object).where(run.table.notna(), None)
    (folder / "questions.json").write_text(json.dumps({"columns": list(table.columns), "data": table.values.tolist()},
                                                      default=str) + "\n")
    (folder / "config.yaml").write_text(f"judge:\n  _target_: {type(judge).__module__}.{type(judge).__qualname__}\n")


def yes_no(values: Sequence[Any]) -> bool:
    given = [v for v in values if v is not None and str(v).strip() != ""]
    return bool(given) and all(isinstance(v, bool) or str(v).strip().lower() in YES_NO for v in given)


def labels_of(rows: Sequence[LabelledRow], run: JudgedRun, group: str | None = None
              ) -> tuple[list[Label], dict[str, dict[str, float]], list[str]]:
    """People's labels in the rows: (labels of judge metrics and hallucination, for the agreement
    table; every yes/no column: column -> question id -> 1/0; notes on columns left aside). The
    `group` column is not a label."""
    columns = [c for c in dict.fromkeys(c for row in rows for c in row.extra) if c != group]
    labels: list[Label] = []
    binary: dict[str, dict[str, float]] = {}
    notes: list[str] = []
    problems: list[str] = []
    for column in columns:
        values = [row.extra.get(column) for row in rows]
        is_yes_no = yes_no(values) and (column not in run.scales or column == "hallucination")
        if column not in run.scales and not is_yes_no:
            notes.append(f"column {column!r} is neither a metric of judge {run.judge!r} ({', '.join(run.scales)}) "
                         "nor a yes/no label: left aside")
            continue
        if is_yes_no:
            binary[column] = {}
        for row, value in zip(rows, values):
            if value is None or str(value).strip() == "":
                continue
            try:
                number = label_value(value)
            except (TypeError, ValueError):
                problems.append(f"{row.where}: {column} label {value!r} is not a number")
                continue
            if is_yes_no:
                binary[column][row.question.qid] = number
            if column in run.scales:
                lo, hi = run.scales[column]
                if not math.isfinite(number) or not lo <= number <= hi:
                    problems.append(f"{row.where}: {column} label {value} is off the judge's scale {lo:g}-{hi:g}")
                    continue
                labels.append(Label(row.question.qid, column, "annotator", number))
    if problems:
        raise RagexpError(f"--outputs: {len(problems)} problems:\n  " + "\n  ".join(problems[:20]))
    if not labels and not binary:
        raise RagexpError(f"--outputs: no label column (one named after a judge metric: {', '.join(run.scales)}; "
                          "or a yes/no column such as hallucination)")
    return labels, binary, notes
