"""Generic JSONL / CSV / TSV files: a questions file and a corpus file, field names set in config."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Callable, Iterator, Mapping

from ragexp.datasets import Loader, RowError, Rows, Unique, existing_path, read_jsonl, undecodable
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt

FIELDS = {"question_id": "id", "question": "question", "answer": "answer", "golden": "golden_docs", "kind": None,
          "source": "source", "answerable": "answerable",
          "doc_id": "doc_id", "text": "text", "title": None}


def read_delimited(delimiter: str) -> Callable[[Path, Rows], Iterator[tuple[int, dict]]]:
    def read(path: Path, rows: Rows) -> Iterator[tuple[int, dict]]:
        # utf-8-sig: a byte-order mark is not part of the first column's name; bytes that are not
        # UTF-8 stay as surrogates, so the row holding them is named (and skipped with on_error=skip)
        with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
            reader = csv.DictReader(handle, delimiter=delimiter)
            try:
                header = undecodable(delimiter.join(reader.fieldnames or []))
                if header:
                    raise RagexpError(f"{path}:1: the header: {header}")
                ended = reader.line_num  # the line the previous record ended on: this one starts after it
                for row in reader:
                    start, ended = ended + 1, reader.line_num  # a record with a quoted newline spans lines
                    where = f"{path}:{start}"
                    if None in row:
                        rows.malformed(where, f"more fields than the header's {len(reader.fieldnames or ())}")
                        continue
                    if None in row.values():  # a row cut short, often the last one of a truncated file
                        rows.malformed(where, f"{sum(v is not None for v in row.values())} fields, fewer than the "
                                              f"header's {len(reader.fieldnames or ())} (a truncated row?)")
                        continue
                    bad_bytes = next((f"field {k!r}: {undecodable(v)}" for k, v in row.items() if undecodable(v)), None)
                    if bad_bytes:
                        rows.malformed(where, bad_bytes)
                        continue
                    yield start, row
            except csv.Error as err:
                raise RagexpError(f"{path}:{reader.line_num}: not valid CSV ({err})") from None
    return read


READERS: dict[str, Callable[[Path, Rows], Iterator[tuple[int, dict]]]] = {
    ".jsonl": read_jsonl, ".ndjson": read_jsonl, ".csv": read_delimited(","), ".tsv": read_delimited("\t"),
}


class TableDataset(Loader):
    """Questions and documents from two files (`.jsonl`, `.csv` or `.tsv`, by suffix), named
    relative to `path` (or absolute). `fields` maps ragexp's fields to your column names
    (a dotted name reaches into nested JSON objects; null = the file has no such field):

    - questions: `question_id`, `question`, `answer` (a string, or a JSON list of strings),
      `golden` (a JSON list of document ids, a JSON object {doc id: grade}, or in CSV one
      string of ids joined by `list_separator`), `kind`, `source` (optional: "golden", "synthetic");
    - documents: `doc_id`, `text`, `title`.
    """

    def __init__(self, path: str | None, questions: str, corpus: str,
                 fields: Mapping[str, str | None] | None, list_separator: str,
                 limit: PositiveInt | None, name: str, on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)
        self.fields = {**FIELDS, **dict(fields or {})}
        self.questions_file, self.corpus_file, self.list_separator = questions, corpus, list_separator

    @classmethod
    def constraints(cls, fields: Mapping | None = None, **settings) -> list[str]:
        """Cross-field checks of the settings, run by ragexp.validation before any work."""
        return [f"fields.{name}: unknown field; the fields are {', '.join(FIELDS)}"
                for name in sorted(set(fields or {}) - set(FIELDS))] + super().constraints(**settings)

    def file(self, name: str, setting: str) -> tuple[Path, Callable]:
        path = Path(name) if Path(name).is_absolute() or not self.path else Path(self.path) / name
        suffix = path.suffix.lower()
        if suffix not in READERS:
            raise RagexpError(f"{setting}: {name} must end in {', '.join(READERS)}")
        return existing_path(path, setting, "file"), READERS[suffix]

    def get(self, row: dict, field: str, required: bool = True):
        name = self.fields[field]
        if name is None:
            return None
        value = row
        for part in name.split("."):
            if not isinstance(value, dict) or part not in value:
                if required:
                    raise RowError(f"no field {name!r} (dataset.fields.{field})")
                return None
            value = value[part]
        return value

    def read(self, rows: Rows) -> Dataset:
        corpus, read_corpus = self.file(self.corpus_file, "dataset.corpus")
        documents, skipped = [], []
        doc_ids, question_ids = Unique("document", rows), Unique("question", rows)
        for number, row in read_corpus(corpus, rows):
            try:
                doc_id, text = self.get(row, "doc_id"), self.get(row, "text")
                title = self.get(row, "title", required=False) or ""
                if not isinstance(doc_id, (str, int)) or doc_id == "" or not isinstance(text, str):
                    raise RowError("the document id and text must be non-empty strings")
            except RowError as err:
                rows.malformed(f"{corpus}:{number}", str(err))
                continue
            if not doc_ids.new(str(doc_id), f"{corpus}:{number}"):
                continue
            if text.strip():
                documents.append(Document(str(doc_id), text, str(title)))
            else:
                skipped.append(str(doc_id))
        source, read_questions = self.file(self.questions_file, "dataset.questions")
        questions: list[Question] = []
        for number, row in read_questions(source, rows):
            if self.full(questions):
                break
            try:
                parsed = self.question(row)
            except RowError as err:
                rows.malformed(f"{source}:{number}", str(err))
                continue
            if question_ids.new(parsed.qid, f"{source}:{number}"):
                questions.append(parsed)
        return Dataset(self.name, tuple(documents), tuple(questions), tuple(skipped))

    def question(self, row: dict) -> Question:
        qid, text = self.get(row, "question_id"), self.get(row, "question")
        if not isinstance(qid, (str, int)) or qid == "" or not isinstance(text, str) or not text.strip():
            raise RowError("the question id and question must be non-empty")
        answer = self.get(row, "answer", required=False)
        answers = [] if answer is None else [answer] if isinstance(answer, str) else answer
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise RowError(f"the answer ({self.fields['answer']}) must be a string or a list of strings")
        answerable = self.answerable(row)
        if not answerable and any(a.strip() for a in answers):
            raise RowError(f"a question marked unanswerable ({self.fields['answerable']}) has no expected answer")
        return Question(str(qid), text, tuple(a for a in answers if a.strip()), self.golden(row),
                        kind=str(self.get(row, "kind", required=False) or ""),
                        source=str(self.get(row, "source", required=False) or ""), answerable=answerable)

    def answerable(self, row: dict) -> bool:
        """The optional `answerable` field: false (or 0, no) marks a question the corpus cannot
        answer, whose correct answer is an abstention; missing or empty: answerable."""
        value = self.get(row, "answerable", required=False)
        if value is None or value == "":
            return True
        named = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if isinstance(value, bool):
            return value
        if str(value).strip().lower() in named:
            return named[str(value).strip().lower()]
        raise RowError(f"answerable ({self.fields['answerable']}) must be true or false, got {value!r}")

    def golden(self, row: dict) -> dict[str, int]:
        value = self.get(row, "golden", required=False)
        if value is None or value == "":
            return {}
        if isinstance(value, str):
            return {d.strip(): 1 for d in value.split(self.list_separator) if d.strip()}
        if isinstance(value, list) and all(isinstance(d, (str, int)) for d in value):
            return {str(d): 1 for d in value}
        if isinstance(value, dict) and all(isinstance(g, int) and not isinstance(g, bool) for g in value.values()):
            return {str(d): g for d, g in value.items()}
        raise RowError(f"golden documents ({self.fields['golden']}) must be a list of ids, "
                       f"{{id: grade}} or ids joined by {self.list_separator!r}")
