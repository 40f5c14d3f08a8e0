"""HotpotQA in the IRCoT JSONL form: corpus = every paragraph, golden = supporting paragraphs."""
from __future__ import annotations

from ragexp.datasets import existing_path, read_jsonl
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question


class HotpotQADataset:
    """Reads `dev_subsampled.jsonl` (or any file in that form). A paragraph's title is its
    document id. The corpus is the union of the paragraphs of every question in the file,
    also when `limit` keeps only the first questions, so retrieval difficulty does not
    depend on the limit."""

    def __init__(self, path: str, limit: int | None = None, name: str = "hotpotqa"):
        self.path = path
        self.limit = limit
        self.name = name

    def load(self) -> Dataset:
        file = existing_path(self.path, "dataset.path")
        if file.is_dir():
            file = existing_path(file / "dev_subsampled.jsonl", "dataset.path")
        paragraphs: dict[str, str] = {}
        skipped: set[str] = set()
        questions = []
        for number, row in read_jsonl(file):
            try:
                contexts = row["contexts"]
                golden = {c["title"]: 1 for c in contexts if c.get("is_supporting")}
                for c in contexts:
                    if c["paragraph_text"].strip():
                        paragraphs.setdefault(c["title"], c["paragraph_text"])
                    else:
                        skipped.add(c["title"])
                spans = [s for a in row.get("answers_objects", []) for s in a.get("spans", []) if s.strip()]
                question = Question(str(row["question_id"]), row["question_text"], tuple(spans), golden)
            except (KeyError, TypeError, AttributeError) as err:
                raise RagexpError(f"{file}:{number}: malformed HotpotQA row (missing or wrong field {err})") from None
            if self.limit is None or len(questions) < self.limit:
                questions.append(question)
        documents = tuple(Document(doc_id=t, text=p, title=t) for t, p in paragraphs.items())
        return Dataset(self.name, documents, tuple(questions), tuple(sorted(skipped - paragraphs.keys())))
