"""BEIR folders: corpus.jsonl, queries.jsonl and qrels/<split>.tsv (graded relevance kept)."""
from __future__ import annotations

from pathlib import Path

from ragexp.datasets import Loader, Rows, Unique, existing_path, read_jsonl, required_path, text_lines, undecodable
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt


class BeirDataset(Loader):
    """A BEIR dataset folder:

    - `corpus.jsonl`: `_id`, `text`, optional `title` (a document's text is its title, a blank
      line and its text, as BEIR's own evaluation embeds them);
    - `queries.jsonl`: `_id`, `text`; optional `answers` (a string or a list) or `metadata.answer`;
    - `qrels/<split>.tsv`: `query-id<TAB>corpus-id<TAB>score` with a header line; the grades
      are kept (NDCG uses them).

    The questions are the queries judged in the split, in queries.jsonl order. BEIR sets rarely
    have expected answers: such questions are scored on retrieval only (and counted as failed
    for generation and judging, with that reason)."""

    def __init__(self, path: str | None, split: str, limit: PositiveInt | None, name: str,
                 on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)
        self.split = split

    def read(self, rows: Rows) -> Dataset:
        root = required_path(self.path, "a BEIR folder with corpus.jsonl, queries.jsonl and qrels/", "folder")
        judged = self.judgements(existing_path(root / "qrels" / f"{self.split}.tsv", "dataset.split", "file"), rows)
        documents, skipped = self.corpus(existing_path(root / "corpus.jsonl", "dataset.path", "file"), rows)
        queries = existing_path(root / "queries.jsonl", "dataset.path", "file")
        questions: list[Question] = []
        query_ids = Unique("query", rows)
        for number, row in read_jsonl(queries, rows):
            if self.full(questions):
                break
            qid, text = row.get("_id"), row.get("text")
            if not isinstance(qid, (str, int)) or not isinstance(text, str):
                rows.malformed(f"{queries}:{number}", 'a query needs "_id" and "text"')
                continue
            if not query_ids.new(str(qid), f"{queries}:{number}"):
                continue
            if str(qid) not in judged:
                continue
            questions.append(Question(str(qid), text, expected_answers(row), judged[str(qid)]))
        return Dataset(self.name, documents, tuple(questions), skipped)

    def corpus(self, file: Path, rows: Rows) -> tuple[tuple[Document, ...], tuple[str, ...]]:
        documents, skipped = [], []
        doc_ids = Unique("document", rows)
        for number, row in read_jsonl(file, rows):
            doc_id, text, title = row.get("_id"), row.get("text"), row.get("title") or ""
            if not isinstance(doc_id, (str, int)) or not isinstance(text, str) or not isinstance(title, str):
                rows.malformed(f"{file}:{number}", 'a document needs "_id" and "text" (and a string "title", if any)')
                continue
            if not doc_ids.new(str(doc_id), f"{file}:{number}"):
                continue
            full = f"{title}\n\n{text}" if title.strip() else text
            if full.strip():
                documents.append(Document(str(doc_id), full, title))
            else:
                skipped.append(str(doc_id))
        return tuple(documents), tuple(skipped)

    def judgements(self, file: Path, rows: Rows) -> dict[str, dict[str, int]]:
        judged: dict[str, dict[str, int]] = {}
        for number, line in text_lines(file):
            fields = line.rstrip("\r\n").split("\t")
            if not line.strip() or (number == 1 and fields[:1] == ["query-id"]):
                continue
            if bad_bytes := undecodable(line):
                rows.malformed(f"{file}:{number}", bad_bytes)
                continue
            if len(fields) < 3:
                rows.malformed(f"{file}:{number}", f"expected query-id, corpus-id and score separated by tabs, "
                                                   f"got {len(fields)} fields")
                continue
            try:
                grade = int(fields[2])
            except ValueError:
                rows.malformed(f"{file}:{number}", f"score {fields[2]!r} is not an integer")
                continue
            judged.setdefault(fields[0].strip(), {})[fields[1].strip()] = grade
        return judged


def expected_answers(query: dict) -> tuple[str, ...]:
    """`answers` (a string or a list of strings), else `metadata.answer`; none when absent."""
    answers = query.get("answers")
    if answers is None and isinstance(query.get("metadata"), dict):
        answers = query["metadata"].get("answer")
    answers = [answers] if isinstance(answers, str) else answers if isinstance(answers, list) else []
    return tuple(a for a in answers if isinstance(a, str) and a.strip())
