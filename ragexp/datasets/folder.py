"""A folder of documents plus a questions.jsonl golden set (the format of the bundled sample)."""
from __future__ import annotations

from pathlib import Path

from ragexp.datasets import Loader, NotUTF8, Rows, RowError, Unique, existing_path, read_jsonl, read_text
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt

SAMPLE_PATH = Path(__file__).parent / "sample"
DOC_SUFFIXES = (".md", ".txt")


class FolderDataset(Loader):
    """`path/docs/*.md|*.txt` (document id = file stem) and `path/questions.jsonl` with
    `id`, `question`, `answer`, `golden_docs`, optional `kind`. `path: null` is the bundled sample."""

    def __init__(self, path: str | None, limit: PositiveInt | None, name: str,
                 on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)

    def read(self, rows: Rows) -> Dataset:
        root = existing_path(self.path, "dataset.path", "folder") if self.path else SAMPLE_PATH
        docs_dir = existing_path(root / "docs", "dataset.path", "folder")
        documents, skipped = [], []
        doc_ids, question_ids = Unique("document", rows), Unique("question", rows)
        for file in sorted(docs_dir.iterdir()):
            if file.suffix not in DOC_SUFFIXES or not file.is_file():
                continue
            try:
                text = read_text(file)
            except NotUTF8 as err:
                rows.malformed(err.where, err.reason)
                continue
            if not doc_ids.new(file.stem, str(file)):
                continue
            if text.strip():
                documents.append(Document(doc_id=file.stem, text=text, title=file.stem))
            else:
                skipped.append(file.stem)
        if not documents:
            raise RagexpError(f"dataset.path: no non-empty .md or .txt files in {docs_dir}")
        questions: list[Question] = []
        qfile = existing_path(root / "questions.jsonl", "dataset.path", "file")
        for number, row in read_jsonl(qfile, rows):
            if self.full(questions):
                break
            try:
                parsed = question(row)
            except RowError as err:
                rows.malformed(f"{qfile}:{number}", str(err))
                continue
            if question_ids.new(parsed.qid, f"{qfile}:{number}"):
                questions.append(parsed)
        return Dataset(self.name, tuple(documents), tuple(questions), tuple(skipped))


def question(row: dict) -> Question:
    if not isinstance(row.get("id"), (str, int)) or not isinstance(row.get("question"), str):
        raise RowError('each row needs "id" and "question"')
    answer = row.get("answer") or ""
    golden = row.get("golden_docs") or []
    if not isinstance(answer, str) or not isinstance(golden, list):
        raise RowError('"answer" must be a string and "golden_docs" a list')
    return Question(
        qid=str(row["id"]),
        text=row["question"],
        answers=(answer,) if answer.strip() else (),
        golden={str(doc_id): 1 for doc_id in golden},
        kind=str(row.get("kind", "")),
    )
