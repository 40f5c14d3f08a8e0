"""HotpotQA in the IRCoT JSONL form: corpus = every paragraph, golden = supporting paragraphs."""
from __future__ import annotations

from ragexp.datasets import Loader, Rows, Unique, existing_path, read_jsonl, required_path
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt


class HotpotQADataset(Loader):
    """Reads `dev_subsampled.jsonl` (or any file in that form). A paragraph's title is its
    document id. The corpus is the union of the paragraphs of every question in the file,
    also when `limit` keeps only the first questions, so retrieval difficulty does not
    depend on the limit."""

    def __init__(self, path: str, limit: PositiveInt | None, name: str,
                 on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)

    def read(self, rows: Rows) -> Dataset:
        file = required_path(self.path, "dev_subsampled.jsonl")
        if file.is_dir():
            file = existing_path(file / "dev_subsampled.jsonl", "dataset.path", "file")
        paragraphs: dict[str, str] = {}
        skipped: set[str] = set()
        questions: list[Question] = []
        question_ids = Unique("question", rows)
        for number, row in read_jsonl(file, rows):
            try:
                contexts = row["contexts"]
                golden = {c["title"]: 1 for c in contexts if c.get("is_supporting")}
                texts = {c["title"]: c["paragraph_text"] for c in contexts}
                if not all(isinstance(t, str) for t in (*texts, *texts.values())):
                    raise TypeError("title/paragraph_text")
                spans = [s for a in row.get("answers_objects", []) for s in a.get("spans", []) if s.strip()]
                question = Question(str(row["question_id"]), row["question_text"], tuple(spans), golden)
            except (KeyError, TypeError, AttributeError) as err:
                rows.malformed(f"{file}:{number}", f"malformed HotpotQA row (missing or wrong field {err})")
                continue
            for title, text in texts.items():
                if text.strip():
                    paragraphs.setdefault(title, text)
                else:
                    skipped.add(title)
            if not self.full(questions) and question_ids.new(question.qid, f"{file}:{number}"):
                questions.append(question)
        documents = tuple(Document(doc_id=t, text=p, title=t) for t, p in paragraphs.items())
        return Dataset(self.name, documents, tuple(questions), tuple(sorted(skipped - paragraphs.keys())))
