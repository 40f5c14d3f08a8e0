"""Dataset loaders: each turns files into a `Dataset` (documents + golden questions).

Every loader is a `Loader`: `path`, `limit` (first N questions), `on_error` (`stop` at the
first malformed row, or `skip` it: skipped rows are counted and reported with the run) and
`qrels` (a TREC qrels file whose judgements replace the loader's golden documents)."""
from __future__ import annotations

import codecs
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from ragexp.base.json_lines import MAX_FIELD_BYTES, MalformedLine, json_record
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Question
from ragexp.base.settings import OnError, PositiveInt


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


def existing_path(path: str | Path, setting: str, kind: str | None = None) -> Path:
    """`path` as an absolute Path, or an error naming the setting to change; `kind` "file" or
    "folder" also requires that kind (a folder given for a file is one line, not a traceback)."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise RagexpError(f"{setting}: {path} does not exist (looked for {resolved}); set {setting}=/path/to/it")
    if kind == "file" and not resolved.is_file():
        raise RagexpError(f"{setting}: {resolved} is a folder, not a file; set {setting}=/path/to/the/file")
    if kind == "folder" and not resolved.is_dir():
        raise RagexpError(f"{setting}: {resolved} is a file, not a folder; set {setting}=/path/to/the/folder")
    return resolved


def required_path(path: str | None, what: str, kind: str | None = None) -> Path:
    if not path:
        raise RagexpError(f"dataset.path: not set; set dataset.path=/path/to/{what}")
    return existing_path(path, "dataset.path", kind)


def undecodable(text: str) -> str | None:
    """Why `text` (decoded with errors="surrogateescape") is not UTF-8, or None when it is."""
    for column, char in enumerate(text, start=1):
        if "\udc80" <= char <= "\udcff":
            return f"byte 0x{ord(char) - 0xDC00:02x} at column {column} is not UTF-8 (save the file as UTF-8)"
    return None


def text_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, a byte-order mark removed; bytes that are not UTF-8
    stay in the text as surrogates for `undecodable` to name."""
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            yield number, raw.decode("utf-8", errors="surrogateescape")


def read_text(path: Path) -> str:
    """A whole UTF-8 file (a byte-order mark removed), or an error naming file:line of the first
    byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise NotUTF8(f"{path}:{line}", f"byte 0x{data[err.start]:02x} at column {column} is not UTF-8 "
                      "(save the file as UTF-8)") from None


class NotUTF8(RowError):
    """A file that is not UTF-8: `where` (file:line) and `reason`."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


class Unique:
    """Ids seen so far and where: a second occurrence is a malformed row naming the id and both
    places (`on_error=skip` keeps the first)."""

    def __init__(self, what: str, rows: Rows):
        self.what, self.rows = what, rows
        self.first: dict[str, str] = {}

    def new(self, id: str, where: str) -> bool:
        if id in self.first:
            self.rows.malformed(where, f"duplicate {self.what} id {id!r} (first at {self.first[id]})")
            return False
        self.first[id] = where
        return True


def read_jsonl(path: Path, rows: Rows | None = None, max_field_bytes: int = MAX_FIELD_BYTES,
               setting: str | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line. A malformed line (the rule of
    `ragexp.base.json_lines.json_record`: not UTF-8, not a JSON object, nested too deep, a lone
    surrogate, a field over `max_field_bytes`, named by `setting`) names file:line: an error, or
    (with `rows` in skip mode) a skipped row."""
    rows = rows or Rows("stop")
    with path.open("rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json_record(line, number, max_field_bytes, setting)
            except MalformedLine as err:
                rows.malformed(f"{path}:{number}", str(err))
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
    """Base of the dataset options: subclasses implement `read(rows) -> Dataset`. A loader of
    recorded outputs (`needs_corpus = False`) gives questions and answers without documents."""

    needs_corpus = True

    def __init__(self, path: str | None = None, limit: PositiveInt | None = None, name: str = "dataset",
                 on_error: OnError = "stop", qrels: str | None = None):
        self.path, self.limit, self.name = path, limit, name
        self.on_error, self.qrels = on_error, qrels

    @classmethod
    def constraints(cls, **settings) -> list[str]:
        """The files it reads exist: checked with the config, so a sweep whose data file is missing is
        refused before any job, as a misspelt setting is (6 of 6 jobs failed one by one)."""
        problems = []
        for setting, value in (("path", settings.get("path")), ("qrels", settings.get("qrels"))):
            where = Path(str(value)).expanduser() if value else None
            if where is not None and not where.exists():
                problems.append(f"{setting}: {value} does not exist (looked for {where.resolve()}); "
                                f"set dataset.{setting}=/path/to/it")
        return problems

    def full(self, questions: list) -> bool:
        """True once `limit` questions are kept: loaders stop reading questions there."""
        return self.limit is not None and len(questions) >= self.limit

    def read(self, rows: Rows) -> Dataset:
        raise NotImplementedError

    def load(self) -> Dataset:
        rows = Rows(self.on_error)
        dataset = self.read(rows)
        if not dataset.documents and self.needs_corpus:
            raise RagexpError(f"dataset.path: no documents in {Path(self.path).resolve() if self.path else dataset.name}"
                              + (f" ({len(dataset.skipped_documents)} empty)" if dataset.skipped_documents else "")
                              + (f" ({len(rows.skipped)} malformed rows skipped)" if rows.skipped else "")
                              + "; a run needs a corpus to retrieve from")
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


__all__ = ["Dataset", "Loader", "NotUTF8", "Question", "RowError", "Rows", "Unique", "existing_path", "fingerprint", "read_jsonl",
           "read_qrels", "read_text", "required_path", "text_lines", "undecodable"]
