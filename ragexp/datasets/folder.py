"""A folder of documents plus a questions.jsonl golden set (the format of the bundled sample)."""
from __future__ import annotations

from pathlib import Path

from ragexp.datasets import existing_path, read_jsonl
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question

SAMPLE_PATH = Path(__file__).parent / "sample"
DOC_SUFFIXES = (".md", ".txt")


class FolderDataset:
    """`path/docs/*.md|*.txt` (document id = file stem) and `path/questions.jsonl` with
    `id`, `question`, `answer`, `golden_docs`, optional `kind`. `path: null` is the bundled sample."""

    def __init__(self, path: str | None = None, limit: int | None = None, name: str = "sample"):
        self.path = path
        self.limit = limit
        self.name = name

    def load(self) -> Dataset:
        root = existing_path(self.path, "dataset.path") if self.path else SAMPLE_PATH
        docs_dir = existing_path(root / "docs", "dataset.path")
        documents, skipped = [], []
        for file in sorted(docs_dir.iterdir()):
            if file.suffix not in DOC_SUFFIXES:
                continue
            text = file.read_text(encoding="utf-8")
            if text.strip():
                documents.append(Document(doc_id=file.stem, text=text, title=file.stem))
            else:
                skipped.append(file.stem)
        if not documents:
            raise RagexpError(f"dataset.path: no non-empty .md or .txt files in {docs_dir}")
        questions = []
        qfile = existing_path(root / "questions.jsonl", "dataset.path")
        for number, row in read_jsonl(qfile):
            if self.limit is not None and len(questions) >= self.limit:
                break
            if not isinstance(row.get("id"), (str, int)) or not isinstance(row.get("question"), str):
                raise RagexpError(f"{qfile}:{number}: each row needs \"id\" and \"question\"")
            answer = row.get("answer") or ""
            golden = row.get("golden_docs") or []
            if not isinstance(answer, str) or not isinstance(golden, list):
                raise RagexpError(f"{qfile}:{number}: \"answer\" must be a string and \"golden_docs\" a list")
            questions.append(
                Question(
                    qid=str(row["id"]),
                    text=row["question"],
                    answers=(answer,) if answer.strip() else (),
                    golden={str(doc_id): 1 for doc_id in golden},
                    kind=str(row.get("kind", "")),
                )
            )
        return Dataset(self.name, tuple(documents), tuple(questions), tuple(skipped))
