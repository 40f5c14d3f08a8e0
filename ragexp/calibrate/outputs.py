"""`python -m ragexp.calibrate --outputs FILE`: calibrate a judge on labelled recorded outputs.

FILE is a recorded-outputs file (the format of `dataset=outputs`: one row per question, JSONL or
CSV; columns `question`, `contexts`, `answer`, `reference`, `golden_docs`, `answerable`, `id`, or
ragas' `user_input`, `retrieved_contexts`, `response`) with people's labels as further columns:
a column named after a judge metric (on the judge's scale) or `hallucination` (yes/no, 1/0), or
any other yes/no column (e.g. `supported`). The configured judge (Hydra overrides such as
`judge=llm`, as for `python -m ragexp`) judges every row through the stage cache and the LLM
session; the judged rows are then a run like any other for `agreement`, and each yes/no label gets
the threshold analysis of `thresholds`.

`read_outputs` is the one place that knows the file format: it can be swapped for the
`dataset=outputs` loader (`ragexp.datasets.outputs`) without touching the rest."""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ragexp.calibrate.labels import Label, label_value
from ragexp.calibrate.source import JudgedRun
from ragexp.errors import QuestionFailed, RagexpError
from ragexp.types import Answer, Hit, Judgement, Question

# ragexp's field -> the column names it is found under (ragexp's, then ragas')
NAMES: dict[str, tuple[str, ...]] = {
    "question": ("question", "user_input"),
    "contexts": ("contexts", "retrieved_contexts"),
    "answer": ("answer", "response"),
    "reference": ("reference", "ground_truth", "references"),
    "golden_docs": ("golden_docs", "reference_context_ids"),
    "answerable": ("answerable",),
    "question_id": ("id", "question_id", "qid"),
}
NOT_LABELS = {name for names in NAMES.values() for name in names} | {
    "context_ids", "retrieved_context_ids", "kind", "source", "annotator", "part", "set", "group"}
YES_NO = {"true", "false", "yes", "no", "y", "n", "1", "0", "1.0", "0.0"}


@dataclass(frozen=True)
class OutputRow:
    """One recorded output: what the judge sees, and the other columns (the labels among them)."""

    where: str  # file:line
    question: Question
    hits: tuple[Hit, ...]
    answer: Answer
    extra: dict[str, Any] = field(default_factory=dict)


def file_rows(path: Path):
    """(line number, dict) of each row of a JSONL or CSV file (cells holding JSON lists read as lists)."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
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
            yield reader.line_num, {k: listed(v) for k, v in row.items() if k is not None}


def listed(value: Any) -> Any:
    if isinstance(value, str) and value.strip()[:1] == "[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def first(row: dict, name: str) -> Any:
    return next((row[c] for c in NAMES[name] if c in row and row[c] not in (None, "")), None)


def read_outputs(path: str | Path) -> list[OutputRow]:
    """The rows of a recorded-outputs file, every problem named with file:line, all at once."""
    from ragexp.monitor.judging import hits_of

    path = Path(path)
    if not path.is_file() or path.suffix.lower() not in (".jsonl", ".ndjson", ".csv"):
        raise RagexpError(f"--outputs: {path} is not a .jsonl or .csv file of recorded outputs")
    rows, problems, seen = [], [], set()
    for number, row in file_rows(path):
        where = f"{path}:{number}"
        text, answer, contexts = first(row, "question"), first(row, "answer"), first(row, "contexts")
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: no question (column {' or '.join(NAMES['question'])})")
            continue
        if answer is not None and not isinstance(answer, str):
            problems.append(f"{where}: the answer is not text: {answer!r}"[:200])
            continue
        contexts = [] if contexts is None else [contexts] if isinstance(contexts, str) else contexts
        if not isinstance(contexts, list):
            problems.append(f"{where}: contexts must be a list of texts or of objects with a text")
            continue
        reference = first(row, "reference")
        answers = tuple(str(a) for a in (reference if isinstance(reference, list) else [reference] if reference else []))
        try:
            answerable = label_value(first(row, "answerable") if first(row, "answerable") is not None else True) == 1.0
        except ValueError:
            problems.append(f"{where}: answerable {first(row, 'answerable')!r} is not true or false")
            continue
        qid = str(first(row, "question_id") or f"row-{number}")
        if qid in seen:
            problems.append(f"{where}: question id {qid!r} given twice")
            continue
        seen.add(qid)
        extra = {k: v for k, v in row.items() if k not in NOT_LABELS}
        rows.append(OutputRow(where, Question(qid, text, answers, answerable=answerable, kind=str(row.get("kind") or "")),
                              hits_of(contexts), Answer(answer or ""), extra))
    if problems:
        raise RagexpError(f"--outputs: {len(problems)} problems:\n  " + "\n  ".join(problems[:20]))
    if not rows:
        raise RagexpError(f"--outputs: {path} holds no row")
    return rows


def compose(overrides: Sequence[str]):
    """The packaged config with `overrides` (as `python -m ragexp` composes it)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ragexp.__main__ import CONF

    try:
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            return hydra_compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as err:
        raise RagexpError(f"overrides: {str(err).splitlines()[0]}") from None


def judge_rows(rows: Sequence[OutputRow], overrides: Sequence[str]) -> tuple[Any, list[Judgement | str]]:
    """The configured judge, and its judgement of each row (or why the row failed: an endpoint
    error, an unreadable reply), through the stage cache and the LLM session as in a run."""
    from omegaconf import OmegaConf

    from ragexp.concurrency import concurrency, map_concurrently
    from ragexp.run.pipeline import Work, build
    from ragexp.store.cache import key_of

    cfg = compose(overrides)
    work = Work(build(cfg.cache))
    with work.embeddings.building():
        judge = build(cfg.judge)
    llm = build(cfg.llm)
    settings = OmegaConf.to_container(cfg.judge, resolve=True)

    def one(row: OutputRow) -> Judgement | str:
        q = row.question
        key = key_of("judgement", settings, q.text, q.answers, [(h.chunk.chunk_id, h.chunk.text) for h in row.hits],
                      row.answer.text)
        try:
            return work.cached("judgement", key, judge.judge, q, row.hits, row.answer)
        except QuestionFailed as err:  # expected; any other exception is a bug and stops the command
            return str(err)

    try:
        llm.connect(judge=judge)
        return judge, map_concurrently(one, list(rows), concurrency(judge), "judging outputs")
    finally:
        llm.close()


def as_run(name: str, judge, rows: Sequence[OutputRow], judged: Sequence[Judgement | str]) -> JudgedRun:
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
            "hallucination": float(j.hallucination) if isinstance(j, Judgement) else None,
            "status": "judged" if ok else "failed", "failure_reason": j if isinstance(j, str) else ""})
    scales = {m: (float(lo), float(hi)) for m, (lo, hi) in dict(getattr(judge, "scales", {})).items()}
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


def labels_of(rows: Sequence[OutputRow], run: JudgedRun) -> tuple[list[Label], dict[str, dict[str, float]], list[str]]:
    """People's labels in the rows: (labels of judge metrics and hallucination, for the agreement
    table; every yes/no column: column -> question id -> 1/0; notes on columns left aside)."""
    columns = list(dict.fromkeys(c for row in rows for c in row.extra))
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
