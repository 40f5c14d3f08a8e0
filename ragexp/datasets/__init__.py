"""Dataset loaders: each turns files into a `Dataset` (documents + golden questions).

Every loader is a `Loader`: `path`, `limit` (first N questions), `on_error` (`stop` at the
first malformed row, or `skip` it: skipped rows are counted and reported with the run) and
`qrels` (a TREC qrels file whose judgements replace the loader's golden documents)."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from ragexp.errors import RagexpError
from ragexp.types import Dataset, Question
from ragexp.validation import OnError, PositiveInt


class RowError(Exception):
    """A malformed row, raised inside a loader's row parser; `Rows` decides what happens."""


class Rows:
    """The `on_error` policy: `stop` raises a RagexpError naming file and line at the first
    malformed row; `skip` remembers "file:line: reason" and goes on."""

    def __init__(self, on_error: OnError = "stop"):
        self.on_error = on_error
        self.skipped: list[str] = []

    def malformed(self, where: str, reason: str) -> None:
        message = f"{where}: {reason}"
        if self.on_error == "stop":
            raise RagexpError(message + " (dataset.on_error=skip leaves such rows out)")
        self.skipped.append(message)


def existing_path(path: str | Path, setting: str) -> Path:
    """`path` as an absolute Path, or an error naming the setting to change."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise RagexpError(f"{setting}: {path} does not exist (looked for {resolved}); set {setting}=/path/to/it")
    return resolved


def required_path(path: str | None, what: str) -> Path:
    if not path:
        raise RagexpError(f"dataset.path: not set; set dataset.path=/path/to/{what}")
    return existing_path(path, "dataset.path")


def read_jsonl(path: Path, rows: Rows | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line. A line that is not a JSON object names
    file:line: an error, or (with `rows` in skip mode) a skipped row."""
    rows = rows or Rows("stop")
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                rows.malformed(f"{path}:{number}", f"not valid JSON ({err.msg}, column {err.colno})")
                continue
            if not isinstance(row, dict):
                rows.malformed(f"{path}:{number}", f"expected a JSON object, got {type(row).__name__}")
                continue
            yield number, row


def corpus_fingerprint(documents) -> str:
    """A hash of the documents alone (what chunking depends on)."""
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(f"D\0{doc.doc_id}\0{doc.text}\0".encode())
    return digest.hexdigest()


def read_qrels(path: str, rows: Rows) -> dict[str, dict[str, int]]:
    """qid -> {doc_id: grade} from a TREC qrels file, malformed lines handled per `on_error`."""
    from ragexp.trec_eval import read_qrels as read_trec_qrels

    return read_trec_qrels(existing_path(path, "dataset.qrels"), rows.malformed)


class Loader:
    """Base of the dataset options: subclasses implement `read(rows) -> Dataset`."""

    def __init__(self, path: str | None = None, limit: PositiveInt | None = None, name: str = "dataset",
                 on_error: OnError = "stop", qrels: str | None = None):
        self.path, self.limit, self.name = path, limit, name
        self.on_error, self.qrels = on_error, qrels

    def full(self, questions: list) -> bool:
        """True once `limit` questions are kept: loaders stop reading questions there."""
        return self.limit is not None and len(questions) >= self.limit

    def read(self, rows: Rows) -> Dataset:
        raise NotImplementedError

    def load(self) -> Dataset:
        rows = Rows(self.on_error)
        dataset = self.read(rows)
        notes = list(dataset.notes)
        if self.qrels:
            qrels = read_qrels(self.qrels, rows)
            dataset = with_qrels(dataset, qrels)
            judged = sum(1 for q in dataset.questions if q.qid in qrels)
            notes.append(f"golden documents from {self.qrels}: {judged} of {len(dataset.questions)} questions judged")
        return replace(dataset, skipped_rows=(*dataset.skipped_rows, *rows.skipped), notes=tuple(notes))


def with_qrels(dataset: Dataset, qrels: dict[str, dict[str, int]]) -> Dataset:
    """The dataset with each question's golden documents taken from `qrels` (none if absent)."""
    return replace(dataset, questions=tuple(replace(q, golden=dict(qrels.get(q.qid, {}))) for q in dataset.questions))


def fingerprint(dataset: Dataset) -> str:
    """A short hash of the corpus and questions: the same data gives the same fingerprint."""
    digest = hashlib.sha256(corpus_fingerprint(dataset.documents).encode())
    for q in dataset.questions:
        digest.update(f"Q\0{q.qid}\0{q.text}\0{json.dumps(q.answers)}\0{json.dumps(sorted(q.golden.items()))}\0".encode())
    return digest.hexdigest()[:16]


__all__ = ["Dataset", "Loader", "Question", "RowError", "Rows", "existing_path", "fingerprint", "read_jsonl",
           "read_qrels", "required_path"]
