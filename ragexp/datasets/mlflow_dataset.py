"""`dataset=mlflow`: a team's test set kept as an MLflow evaluation dataset (`mlflow.genai.datasets`),
read by name from a tracking store that keeps them (a database: sqlite:///mlflow.db, or an MLflow
server).

Each record is read as a row of recorded outputs with the MLflow preset (ragexp.datasets.outputs):
`inputs` the question, `outputs` (if recorded) the answer and contexts, the record's id the question
id; of its expectations, `expected_response` is the reference answer (else the `expected_facts`,
joined), the `doc_uri` of each `expected_retrieved_context` a golden document, and `guidelines` a
column of the row (a rubric criterion reads it with `reads: [guidelines]`). With no recorded
outputs, choose the system that answers (`system=python`, `system=http`). The dataset's digest is
in the run's notes; `digest=` refuses to run when the dataset has changed since."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from ragexp.datasets import Rows
from ragexp.datasets.outputs import OutputsDataset
from ragexp.errors import RagexpError
from ragexp.types import Dataset
from ragexp.base.settings import OnError, PositiveInt


class MlflowDataset(OutputsDataset):
    """The MLflow evaluation dataset `name` (see the module's docstring); `digest`: the version
    expected (a changed dataset is refused); `tracking_uri`: the store (null: $MLFLOW_TRACKING_URI,
    else MLflow's default, sqlite:///mlflow.db)."""

    def __init__(self, name: str | None, digest: str | None, tracking_uri: str | None,
                 columns: Mapping[str, str | None] | None, limit: PositiveInt | None,
                 on_error: OnError, qrels: str | None, list_separator: str, max_field_bytes: PositiveInt):
        super().__init__(None, columns, "mlflow", list_separator, limit=limit, name=name or "mlflow", on_error=on_error,
                         qrels=qrels, max_field_bytes=max_field_bytes)
        self.dataset, self.digest, self.tracking_uri = name, digest, tracking_uri
        self.found_digest: str | None = None

    @classmethod
    def constraints(cls, columns: Mapping | None = None, name: str | None = None, **settings) -> list[str]:
        """A dataset named (before any work), the columns and files as for recorded outputs."""
        problems = [] if name else ["name: not set; set dataset.name=NAME, the MLflow evaluation dataset to read"]
        return problems + super().constraints(columns=columns, **settings)

    def records(self, rows: Rows) -> Iterator[tuple[str, dict]]:
        for record in self.fetched():
            yield f"MLflow dataset {self.dataset}: record {record['dataset_record_id']}", row_of(record)

    def read(self, rows: Rows) -> Dataset:
        dataset = super().read(rows)
        note = f"MLflow evaluation dataset {self.dataset!r}, digest {self.found_digest}"
        return replace(dataset, notes=(*dataset.notes, note))

    def fetched(self) -> list[dict]:
        """The dataset's records (as dicts), in the order they were added; a RagexpError naming the
        setting to change when the store has no such dataset or keeps none."""
        import mlflow
        from mlflow.exceptions import MlflowException
        from mlflow.genai import datasets

        if self.tracking_uri:
            mlflow.set_tracking_uri(self.tracking_uri)
        uri = mlflow.get_tracking_uri()
        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
            raise RagexpError(f"dataset.tracking_uri: no MLflow store at {uri} (the file does not exist); "
                              "set dataset.tracking_uri=sqlite:///path/to/mlflow.db, the store that keeps the dataset")
        try:
            found = datasets.get_dataset(name=self.dataset)
        except MlflowException as err:
            if "RESOURCE_DOES_NOT_EXIST" not in str(err.error_code) and "not found" not in str(err).lower():
                why = err.message.split(". ")[0]
                raise RagexpError(f"dataset.name: the MLflow store at {uri} cannot give evaluation datasets ({why}); "
                                  "keep them in a database (sqlite:///mlflow.db) or an MLflow server, "
                                  "set dataset.tracking_uri=...") from None
            names = sorted(d.name for d in datasets.search_datasets())
            raise RagexpError(f"dataset.name: no MLflow evaluation dataset {self.dataset!r} in {uri}; "
                              + (f"it has {', '.join(names)}" if names else "it has none")) from None
        except Exception as err:  # noqa: BLE001 - a store MLflow cannot open is a setting to fix
            raise RagexpError(f"dataset.tracking_uri: the MLflow store at {uri} cannot be read "
                              f"({type(err).__name__}: {err})") from None
        self.found_digest = found.digest
        if self.digest and self.digest != found.digest:
            raise RagexpError(f"dataset.digest: the MLflow dataset {self.dataset!r} is now at digest {found.digest}, "
                              f"not {self.digest}: it changed since; set dataset.digest={found.digest} to run on it")
        frame = found.to_df()
        records = frame.to_dict(orient="records") if len(frame) else []
        return sorted(records, key=lambda r: (r.get("created_time") or 0, str(r.get("dataset_record_id"))))


def row_of(record: Mapping[str, Any]) -> dict:
    """An MLflow dataset record as a row of recorded outputs (MLflow preset): its expectations'
    retrieved context as golden document ids, its facts as the reference when it has no expected
    response, its guidelines as a column."""
    expectations = dict(record.get("expectations") or {})
    context = expectations.get("expected_retrieved_context")
    if "golden_docs" not in expectations and isinstance(context, list) and context:
        uris = [c.get("doc_uri") for c in context if isinstance(c, Mapping)]
        if all(isinstance(u, str) and u for u in uris):
            expectations["golden_docs"] = uris
    facts = expectations.get("expected_facts")
    if "expected_response" not in expectations and isinstance(facts, list) and facts:
        expectations["expected_response"] = "; ".join(str(f) for f in facts)
    row: dict = {"inputs": record.get("inputs"), "expectations": expectations,
                 "dataset_record_id": record.get("dataset_record_id")}
    if record.get("outputs"):
        row["outputs"] = record["outputs"]
    guidelines = expectations.get("guidelines")
    if guidelines:
        row["guidelines"] = guidelines if isinstance(guidelines, str) else "; ".join(map(str, guidelines))
    return row
