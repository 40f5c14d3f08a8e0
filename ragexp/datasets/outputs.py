"""`dataset=outputs`: what a RAG system already produced, one row per question, read from JSONL,
CSV or Parquet (or given as rows: the Python API), with no corpus.

The reusable API: `ragexp.config.build.from_yaml("dataset/outputs", path=..., columns=...,
preset=...).load()` (the loader of conf/dataset/outputs.yaml, the settings given over its
defaults) gives a `Dataset` whose `questions` carry the references, golden documents and
`answerable`, and whose `outputs` (qid -> `Output`: the answer and the contexts as Hits) are what
the system answered; `.with_rows(rows)` before `.load()` reads rows already in memory (dicts).

Columns, when not set in `columns`, are found under ragexp's or ragas' names (ragas' files are read
without any mapping): question / user_input, contexts / retrieved_contexts (strings, or objects with
`text` and optionally `doc_id` and `score`), context_ids / retrieved_context_ids (their document
ids), answer / response (none at all: a retrieval-only row), reference / ground_truth (one expected
answer or a list), golden_docs / reference_context_ids (ids, {id: grade}, or in CSV ids joined by
`list_separator`), answerable, id / question_id. Every other column with a scalar value is kept
with the question (`kind` and `source` as such), so `slices=[kind,channel]` slices by it.
`preset=mlflow` reads MLflow evaluation datasets and exported traces: inputs / request, outputs /
response, expectations.expected_response, trace_id, and a trace's retrieved documents (its last
RETRIEVER span) as the contexts; a context object's `doc_uri` is its document id."""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Mapping

from ragexp.base.json_lines import MalformedLine, check_values
from ragexp.components.systems import ContextError, hits_from_contexts
from ragexp.datasets import Loader, RowError, Rows, Unique, existing_path, read_jsonl
from ragexp.datasets.table import read_delimited
from ragexp.errors import RagexpError
from ragexp.types import Answer, Dataset, Output, Question
from ragexp.base.settings import OnError, PositiveInt

FIELDS = ("question", "contexts", "context_ids", "answer", "reference", "golden_docs", "answerable", "question_id")
# the names each field is looked for under, in order, when `columns` does not name it
DEFAULT_NAMES: dict[str, tuple[str, ...]] = {
    "question": ("question", "user_input"),
    "contexts": ("contexts", "retrieved_contexts"),
    "context_ids": ("context_ids", "retrieved_context_ids"),
    "answer": ("answer", "response"),
    "reference": ("reference", "ground_truth", "references"),
    "golden_docs": ("golden_docs", "reference_context_ids"),
    "answerable": ("answerable",),
    "question_id": ("id", "question_id", "qid"),
}
MLFLOW_NAMES: dict[str, tuple[str, ...]] = {
    "question": ("inputs", "request"),
    "contexts": ("outputs.contexts", "outputs.retrieved_contexts", "retrieved_contexts"),
    "context_ids": (),
    "answer": ("outputs", "response"),
    "reference": ("expectations.expected_answers", "expectations.expected_response", "expectations.expected_answer",
                  "expectations.reference"),
    "golden_docs": ("expectations.golden_docs", "expectations.expected_document_ids"),
    "answerable": ("expectations.answerable",),
    "question_id": ("trace_id", "dataset_record_id", "request_id", "id"),
}
PRESETS = {None: DEFAULT_NAMES, "mlflow": MLFLOW_NAMES}
# an exported trace's own bookkeeping: read for its spans, never kept as a column of the question
TRACE_COLUMNS = {"trace", "spans", "trace_metadata", "tags", "assessments", "state", "request_time",
                 "execution_duration", "client_request_id"}
CAP_SETTING = "dataset.max_field_bytes"
TEXT_KEYS = ("question", "query", "input", "request", "answer", "response", "content", "output", "text")


def text_of(value: Any) -> Any:
    """An MLflow request or response as text: a string as it is (a JSON string decoded first), an
    object by its one text field (question, query, input, answer, response, content, ...), a chat
    request by its last user message, a chat completion by its first choice; else the value."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if isinstance(value, Mapping):
        if isinstance(value.get("messages"), list) and value["messages"]:
            users = [m for m in value["messages"] if isinstance(m, Mapping) and m.get("role") == "user"]
            return text_of((users or value["messages"])[-1].get("content"))
        if isinstance(value.get("choices"), list) and value["choices"]:
            choice = value["choices"][0]
            return text_of(choice.get("message", {}).get("content") if isinstance(choice, Mapping) else choice)
        named = [value[k] for k in TEXT_KEYS if isinstance(value.get(k), str)]
        if named:
            return named[0]
        strings = [v for v in value.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return value


def retrieved_in_spans(row: Mapping) -> list[dict] | None:
    """The documents of an exported MLflow trace's last RETRIEVER span (what the answer was made
    from), as contexts with `text` and `doc_id`: from the row's `spans` (mlflow.search_traces) or its
    `trace` (the trace as JSON); None when it has no such span."""
    spans = row.get("spans")
    if spans is None and row.get("trace") is not None:
        trace = row["trace"]
        trace = json.loads(trace) if isinstance(trace, str) and trace[:1] == "{" else trace
        spans = (trace.get("data") or {}).get("spans") if isinstance(trace, Mapping) else None
    spans = listed(spans)
    if not isinstance(spans, list):
        return None

    def attribute(span, name):
        value = (span.get("attributes") or {}).get(name) if isinstance(span, Mapping) else None
        try:
            return json.loads(value) if isinstance(value, str) else value
        except ValueError:
            return value

    retrievers = [s for s in spans if attribute(s, "mlflow.spanType") == "RETRIEVER"]
    if not retrievers:
        return None
    documents = attribute(retrievers[-1], "mlflow.spanOutputs") or []
    return [{"text": d.get("page_content", ""), **({"doc_id": str(d["metadata"]["doc_uri"])}
                                                  if isinstance(d.get("metadata"), Mapping) and d["metadata"].get("doc_uri")
                                                  else {})}
            for d in documents if isinstance(d, Mapping)]


def field_at(row: Mapping, dotted: str) -> tuple[bool, Any]:
    """(found, value) at a dotted column name (`inputs.question` reaches into a nested object)."""
    if dotted in row:
        return True, row[dotted]
    value: Any = row
    for part in dotted.split("."):
        if isinstance(value, str) and value[:1] == "{":
            try:
                value = json.loads(value)
            except ValueError:
                return False, None
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


def listed(value: Any) -> Any:
    """A list given as text (a CSV or Parquet cell) as the list: JSON (`["a", "b"]`), or Python's
    own spelling as pandas writes a list column to CSV (`['a', 'b']`, read as a literal: no code
    runs); a numpy array as a list."""
    if isinstance(value, str) and value.strip()[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            pass
        try:
            literal = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
        return literal if isinstance(literal, (list, dict, tuple)) else value
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    return value


def plain(value: Any) -> Any:
    """A Parquet cell as plain Python: numpy arrays and scalars as lists and numbers, also nested."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return plain(value.tolist())
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def missing(value: Any) -> bool:
    """An empty cell: None, NaN, or an empty string."""
    return value is None or value == "" or (isinstance(value, float) and value != value)


class OutputsDataset(Loader):
    """Recorded outputs (see the module's docstring): `path` a .jsonl, .csv, .tsv or .parquet file;
    `columns` maps ragexp's fields to your column names (null = found under the default names);
    `preset` `mlflow` for MLflow evaluation datasets and traces."""

    needs_corpus = False

    def __init__(self, path: str | None, columns: Mapping[str, str | None] | None,
                 preset: Literal["mlflow"] | None, list_separator: str,
                 limit: PositiveInt | None, name: str, on_error: OnError,
                 qrels: str | None, max_field_bytes: PositiveInt):
        super().__init__(path, limit, name, on_error, qrels)
        self.max_field_bytes = max_field_bytes
        self.columns = {k: v for k, v in dict(columns or {}).items() if v}
        self.preset, self.list_separator = preset, list_separator
        self.rows: list[dict] | None = None  # rows given in memory (from_rows)
        self.places: dict[str, str] = {}  # question id -> where its row is (file:line), filled by load()

    @classmethod
    def constraints(cls, columns: Mapping | None = None, **settings) -> list[str]:
        return [f"columns.{name}: unknown field; the fields are {', '.join(FIELDS)}"
                for name in sorted(set(columns or {}) - set(FIELDS))] + super().constraints(**settings)

    def with_rows(self, rows: Iterable[Mapping]) -> OutputsDataset:
        """This loader reading rows already in memory (dicts, as a JSONL file would hold them)
        instead of `path`: `from_yaml("dataset/outputs", preset="mlflow").with_rows(rows).load()`."""
        self.rows = [dict(r) for r in rows]
        return self

    def records(self, rows: Rows) -> Iterator[tuple[str, dict]]:
        """(where, row) for each row of the file or of the rows given, malformed ones (the readers'
        rule, `ragexp.base.json_lines`: a lone surrogate, a field over `max_field_bytes`, ...) left to
        `rows` (on_error)."""
        if self.rows is not None:
            yield from self.checked(rows, ((f"{self.name}:row {number}", row) for number, row in enumerate(self.rows, start=1)))
            return
        if not self.path:
            raise RagexpError("dataset.path: not set; set dataset.path=/path/to/outputs.jsonl (or .csv, .parquet)")
        path = existing_path(self.path, "dataset.path", "file")
        suffix = path.suffix.lower()
        if suffix in (".jsonl", ".ndjson"):  # read_jsonl holds each line to the rule itself
            for number, row in read_jsonl(path, rows, self.max_field_bytes, CAP_SETTING):
                yield f"{path}:{number}", row
        elif suffix in (".csv", ".tsv"):
            delimited = read_delimited("\t" if suffix == ".tsv" else ",")(path, rows)
            yield from self.checked(rows, ((f"{path}:{number}", row) for number, row in delimited))
        elif suffix == ".parquet":
            yield from self.checked(rows, self.parquet(path))
        else:
            raise RagexpError(f"dataset.path: {path.name} must end in .jsonl, .csv, .tsv or .parquet")

    def checked(self, rows: Rows, found: Iterable[tuple[str, dict]]) -> Iterator[tuple[str, dict]]:
        """The rows that keep the readers' rule (values only: these rows were not JSON text)."""
        for where, row in found:
            try:
                check_values(row, self.max_field_bytes, CAP_SETTING)
            except MalformedLine as err:
                rows.malformed(where, str(err))
                continue
            yield where, row

    def parquet(self, path: Path) -> Iterator[tuple[str, dict]]:
        import pandas as pd

        try:
            frame = pd.read_parquet(path)
        except Exception as err:  # noqa: BLE001 - a file pyarrow cannot read is the user's to fix
            raise RagexpError(f"dataset.path: {path} is not a readable Parquet file ({type(err).__name__}: {err})") from None
        for number, row in enumerate(frame.to_dict(orient="records"), start=1):
            yield f"{path}:row {number}", {str(k): plain(v) for k, v in row.items()}

    def value(self, row: Mapping, field: str, where: str) -> tuple[str | None, Any]:
        """(column, value) of a field in a row: the column `columns` names (absent: a RowError naming
        the setting), else the first default name the row has; (None, None) when it has none."""
        if field in self.columns:
            found, value = field_at(row, self.columns[field])
            if not found:
                raise RowError(f"no column {self.columns[field]!r} (dataset.columns.{field})")
            return self.columns[field], value
        for name in PRESETS[self.preset][field]:
            found, value = field_at(row, name)
            if found and not missing(value):
                return name, value
        return None, None

    def read(self, rows: Rows) -> Dataset:
        questions: list[Question] = []
        outputs: dict[str, Output] = {}
        ids = Unique("question", rows)
        self.places = {}
        for where, row in self.records(rows):
            if self.full(questions):
                break
            try:
                question, output = self.parse(row, where, len(questions) + 1)
            except RowError as err:
                rows.malformed(where, str(err))
                continue
            if ids.new(question.qid, where):
                questions.append(question)
                outputs[question.qid] = output
                self.places[question.qid] = where
        return Dataset(self.name, (), tuple(questions), outputs=outputs)

    def parse(self, row: Mapping, where: str, number: int) -> tuple[Question, Output]:
        """One row as a Question and the Output recorded for it; RowError naming the field."""
        column, text = self.value(row, "question", where)
        text = text_of(text) if self.preset == "mlflow" else text
        if column is None:
            names = self.columns.get("question") or " or ".join(PRESETS[self.preset]["question"])
            raise RowError(f"no question (column {names}; set dataset.columns.question=...)")
        if not isinstance(text, str) or not text.strip():
            raise RowError(f"the question ({column}) must be non-empty text, got {text!r}")
        id_column, qid = self.value(row, "question_id", where)
        if id_column is not None and (isinstance(qid, bool) or not isinstance(qid, (str, int)) or qid == ""):
            raise RowError(f"the question id ({id_column}) must be a string or an integer, got {qid!r}")
        qid = str(qid) if id_column is not None else f"q{number}"
        answer_column, answer = self.value(row, "answer", where)
        answer = text_of(answer) if self.preset == "mlflow" else answer
        if answer_column is not None and not missing(answer) and not isinstance(answer, str):
            raise RowError(f"the answer ({answer_column}) must be text, got {type(answer).__name__}")
        hits = self.hits(row, where)
        references = self.references(row, where)
        answerable = self.answerable(row, where)
        if not answerable and references:
            raise RowError("a question marked unanswerable has no reference answer")
        used = {c for c in (column, id_column, answer_column) if c} | {self.columns.get(f) or n for f in FIELDS
                                                                       for n in PRESETS[self.preset][f]}
        used |= TRACE_COLUMNS if self.preset == "mlflow" else set()
        extra = {str(k): str(v) for k, v in row.items()
                 if k not in used and isinstance(v, (str, int, float, bool)) and not missing(v)}
        question = Question(qid, text, references, self.golden(row, where), kind=extra.pop("kind", ""),
                            answerable=answerable, source=extra.pop("source", ""), attributes=extra,
                            id_from_row=id_column is None)
        return question, Output(Answer(answer) if not missing(answer) else None, hits)

    def hits(self, row: Mapping, where: str):
        column, contexts = self.value(row, "contexts", where)
        if column is None and self.preset == "mlflow":
            contexts = retrieved_in_spans(row)
            column = "spans (RETRIEVER)" if contexts is not None else None
        contexts = listed(contexts)
        if self.preset == "mlflow" and isinstance(contexts, list):  # MLflow names a document by its doc_uri
            contexts = [{**c, "doc_id": c["doc_uri"]} if isinstance(c, Mapping) and c.get("doc_uri") and "doc_id" not in c
                        else c for c in contexts]
        if column is not None and isinstance(contexts, str):
            raise RowError(f"the contexts ({column}) must be a list of strings or of objects with a text, "
                           f"such as [\"first passage\", \"second\"] (JSON) or ['first passage', 'second'] (as pandas "
                           "writes a list to CSV); got a string that is neither")
        try:
            hits = hits_from_contexts(contexts)
        except ContextError as err:
            raise RowError(f"the contexts ({column}): {err}") from None
        id_column, context_ids = self.value(row, "context_ids", where)
        context_ids = listed(context_ids)
        if id_column is not None:
            if not isinstance(context_ids, list) or len(context_ids) != len(hits):
                raise RowError(f"{id_column} must be a list of one document id per context ({len(hits)})")
            from dataclasses import replace

            hits = tuple(replace(h, chunk=replace(h.chunk, chunk_id=f"{d}#{h.rank}", doc_id=str(d)))
                         for h, d in zip(hits, context_ids))
        return hits

    def references(self, row: Mapping, where: str) -> tuple[str, ...]:
        column, value = self.value(row, "reference", where)
        value = listed(value)
        if column is None or missing(value):
            return ()
        answers = [value] if isinstance(value, str) else value
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise RowError(f"the reference ({column}) must be a string or a list of strings")
        return tuple(a for a in answers if a.strip())

    def answerable(self, row: Mapping, where: str) -> bool:
        column, value = self.value(row, "answerable", where)
        if column is None or missing(value):
            return True
        if isinstance(value, bool):
            return value
        named = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if str(value).strip().lower() in named:
            return named[str(value).strip().lower()]
        raise RowError(f"answerable ({column}) must be true or false, got {value!r}")

    def golden(self, row: Mapping, where: str) -> dict[str, int]:
        column, value = self.value(row, "golden_docs", where)
        value = listed(value)
        if column is None or missing(value):
            return {}
        if isinstance(value, str):
            return {d.strip(): 1 for d in value.split(self.list_separator) if d.strip()}
        if isinstance(value, list) and all(isinstance(d, (str, int)) and not isinstance(d, bool) for d in value):
            return {str(d): 1 for d in value}
        if isinstance(value, Mapping) and all(isinstance(g, int) and not isinstance(g, bool) for g in value.values()):
            return {str(d): g for d, g in value.items()}
        raise RowError(f"the golden documents ({column}) must be a list of ids, {{id: grade}} "
                       f"or ids joined by {self.list_separator!r}")
