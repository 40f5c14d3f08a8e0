"""AutoRAG's parquet layout: qa.parquet + corpus.parquet."""
from __future__ import annotations

from pathlib import Path

from ragexp.datasets import Loader, RowError, Rows, Unique, existing_path, required_path
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt

QA_COLUMNS = ("qid", "query", "generation_gt", "retrieval_gt")
CORPUS_COLUMNS = ("doc_id", "contents")


def read_parquet(file: Path, columns: tuple[str, ...]) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except Exception as err:
        raise RagexpError(f"{file}: not a readable parquet file ({err})") from None
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise RagexpError(f"{file}: missing column {', '.join(missing)} (it has {', '.join(table.column_names)})")
    try:
        return table.select(list(columns)).to_pylist()
    except (UnicodeDecodeError, ValueError) as err:  # e.g. a string column holding bytes that are not UTF-8
        raise RagexpError(f"{file}: a value cannot be read ({type(err).__name__}: {err})") from None


def strings(value, field: str, nested: bool = False) -> list[str]:
    """A string, a list of strings, or (nested) a list of lists of strings, flattened."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        raise RowError(f"{field} must be a list, got {type(value).__name__}")
    flat = []
    for item in value:
        if nested and isinstance(item, (list, tuple)):
            flat += strings(item, field)
        elif isinstance(item, str):
            flat.append(item)
        else:
            raise RowError(f"{field} must hold strings{' or lists of strings' if nested else ''}, got {item!r}")
    return flat


class AutoRAGDataset(Loader):
    """`path/qa.parquet` (`qid`, `query`, `generation_gt`: expected answers, `retrieval_gt`:
    golden doc ids as a list of lists) and `path/corpus.parquet` (`doc_id`, `contents`). AutoRAG's
    retrieval_gt groups are flattened: every listed document is relevant (grade 1). A malformed
    row is named by file and row number (1-based)."""

    def __init__(self, path: str | None, limit: PositiveInt | None, name: str,
                 on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)

    def read(self, rows: Rows) -> Dataset:
        root = required_path(self.path, "a folder with qa.parquet and corpus.parquet", "folder")
        corpus_file = existing_path(root / "corpus.parquet", "dataset.path", "file")
        documents, skipped = [], []
        doc_ids, question_ids = Unique("document", rows), Unique("question", rows)
        for number, row in enumerate(read_parquet(corpus_file, CORPUS_COLUMNS), start=1):
            if not isinstance(row["doc_id"], (str, int)) or not isinstance(row["contents"], str):
                rows.malformed(f"{corpus_file}: row {number}", "doc_id and contents must be strings")
            elif not doc_ids.new(str(row["doc_id"]), f"{corpus_file}: row {number}"):
                continue
            elif row["contents"].strip():
                documents.append(Document(str(row["doc_id"]), row["contents"]))
            else:
                skipped.append(str(row["doc_id"]))
        qa_file = existing_path(root / "qa.parquet", "dataset.path", "file")
        questions: list[Question] = []
        for number, row in enumerate(read_parquet(qa_file, QA_COLUMNS), start=1):
            if self.full(questions):
                break
            try:
                if row["qid"] is None or not isinstance(row["query"], str):
                    raise RowError("qid and query are required")
                answers = tuple(a for a in strings(row["generation_gt"] or [], "generation_gt") if a.strip())
                golden = {doc: 1 for doc in strings(row["retrieval_gt"] or [], "retrieval_gt", nested=True)}
                question = Question(str(row["qid"]), row["query"], answers, golden)
            except RowError as err:
                rows.malformed(f"{qa_file}: row {number}", str(err))
                continue
            if question_ids.new(question.qid, f"{qa_file}: row {number}"):
                questions.append(question)
        return Dataset(self.name, tuple(documents), tuple(questions), tuple(skipped))
