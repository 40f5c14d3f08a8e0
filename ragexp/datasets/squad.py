"""SQuAD v1.1 / v2.0 JSON: each paragraph (context) is a document; unanswerable questions are kept."""
from __future__ import annotations

import codecs
import json

from ragexp.datasets import Loader, RowError, Rows, Unique, required_path, undecodable
from ragexp.errors import RagexpError
from ragexp.types import Dataset, Document, Question
from ragexp.base.settings import OnError, PositiveInt


class SquadDataset(Loader):
    """A SQuAD file (`{"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}`).

    - Each paragraph is a document with id `<title>/<paragraph index>`; the corpus is every
      paragraph of the file, also with `limit`.
    - A question's golden document is its paragraph; its expected answers are the distinct
      `answers[].text`.
    - A SQuAD 2.0 question with `is_impossible: true` (or no answers) is kept, marked
      `kind: unanswerable` and `answerable: false`, with no expected answer: an abstention is its
      correct answer (the abstention metrics and the judges say so). Its paragraph stays its golden
      document (the topic it was written against); the `span` relevance rule leaves it out.
    - A malformed entry is named by file and JSON path (`data[3].paragraphs[2].qas[5]`): a SQuAD
      file is one JSON document, often on one line, so a line number would not locate it.
    """

    def __init__(self, path: str | None, limit: PositiveInt | None, name: str,
                 on_error: OnError, qrels: str | None):
        super().__init__(path, limit, name, on_error, qrels)

    def read(self, rows: Rows) -> Dataset:
        file = required_path(self.path, "a SQuAD .json file", "file")
        raw = file.read_bytes()
        raw = raw[len(codecs.BOM_UTF8):] if raw.startswith(codecs.BOM_UTF8) else raw
        try:  # bytes that are not UTF-8 stay as surrogates: the entry holding them is named below
            data = json.loads(raw.decode("utf-8", errors="surrogateescape"))
        except json.JSONDecodeError as err:
            raise RagexpError(f"{file}:{err.lineno}: not valid JSON ({err.msg}, column {err.colno})") from None
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise RagexpError(f'{file}: not a SQuAD file (expected {{"data": [...]}} at the top)')
        documents, skipped, questions = [], [], []  # type: list[Document], list[str], list[Question]
        doc_ids, question_ids = Unique("document", rows), Unique("question", rows)
        for i, article in enumerate(data["data"]):
            where = f"{file}: data[{i}]"
            if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
                rows.malformed(where, 'an article needs "paragraphs" (a list)')
                continue
            title = str(article.get("title", i))
            for j, paragraph in enumerate(article["paragraphs"]):
                context = paragraph.get("context") if isinstance(paragraph, dict) else None
                if not isinstance(context, str) or not isinstance(paragraph.get("qas", []), list):
                    rows.malformed(f"{where}.paragraphs[{j}]", 'a paragraph needs "context" (a string) and "qas" (a list)')
                    continue
                doc_id = f"{title}/{j}"
                bad_bytes = undecodable(title + context)
                if bad_bytes or not doc_ids.new(doc_id, f"{where}.paragraphs[{j}]"):
                    if bad_bytes:
                        rows.malformed(f"{where}.paragraphs[{j}]", f"title or context: {bad_bytes}")
                    continue
                if context.strip():
                    documents.append(Document(doc_id, context, title))
                else:
                    skipped.append(doc_id)
                for k, qa in enumerate(paragraph.get("qas", [])):
                    if self.full(questions):
                        break
                    try:
                        parsed = self.question(qa, doc_id)
                    except RowError as err:
                        rows.malformed(f"{where}.paragraphs[{j}].qas[{k}]", str(err))
                        continue
                    if question_ids.new(parsed.qid, f"{where}.paragraphs[{j}].qas[{k}]"):
                        questions.append(parsed)
        return Dataset(self.name, tuple(documents), tuple(questions), tuple(skipped))

    def question(self, qa, doc_id: str) -> Question:
        if not isinstance(qa, dict) or not isinstance(qa.get("id"), (str, int)) or not isinstance(qa.get("question"), str):
            raise RowError('a question needs "id" and "question"')
        answers = qa.get("answers", [])
        if not isinstance(answers, list) or not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
            raise RowError('"answers" must be a list of {"text": ...}')
        texts = tuple(dict.fromkeys(a["text"] for a in answers if a["text"].strip()))
        bad_bytes = undecodable(str(qa["id"]) + qa["question"] + "".join(texts))
        if bad_bytes:
            raise RowError(f"id, question or answers: {bad_bytes}")
        if qa.get("is_impossible") or not texts:
            return Question(str(qa["id"]), qa["question"], (), {doc_id: 1}, kind="unanswerable", answerable=False)
        return Question(str(qa["id"]), qa["question"], texts, {doc_id: 1}, kind="answerable")
