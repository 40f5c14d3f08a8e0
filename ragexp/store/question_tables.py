"""A run's per-question table read from a file: as `mlflow.log_table` stores it (questions.json), or
a run folder's questions.jsonl, one row a line."""
from __future__ import annotations

import json
from pathlib import Path

TABLE = "questions.json"  # as MLflow stores a logged table


def read_table(path: Path):
    """The DataFrame `mlflow.log_table` stored as JSON ({"columns": [...], "data": [[...], ...]})."""
    import pandas as pd

    data = json.loads(path.read_text())
    return pd.DataFrame(data["data"], columns=data["columns"])


TABLES = (TABLE, "questions.jsonl")  # a run folder's per-question table: as MLflow stores it, or one row a line
# the columns of that table that describe a question rather than score it
NOT_SCORES = frozenset({"question_id", "question", "kind", "source", "expected_answer", "generated_answer",
                        "golden_doc_ids", "retrieved_chunk_ids", "retrieved_chunks", "judge", "reasoning",
                        "retrieval_excluded", "status", "failure_reason", "repeat_scores", "repeat_hallucination"})


def flat_row(record: dict) -> dict:
    """A row of the run folder's questions.jsonl (ragexp.store.run_folder.question_record) as a table row."""
    if "judge_scores" not in record:
        return record
    return {"question_id": record["question_id"], "question": record["question"], "kind": record.get("kind", ""),
            "expected_answer": (record.get("expected_answers") or [""])[0], "generated_answer": record.get("answer") or "",
            "retrieved_chunks": json.dumps([c["text"] for c in record.get("context", [])]),
            **(record.get("judge_scores") or {}), "hallucination": record.get("hallucination"),
            "status": record.get("status", "judged"), **({"id_from_row": True} if record.get("id_from_row") else {})}


def read_table_file(path: Path):
    import pandas as pd

    if path.suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").splitlines()
        return pd.DataFrame([flat_row(json.loads(line)) for line in lines if line.strip()])
    data = json.loads(path.read_text(encoding="utf-8"))
    return pd.DataFrame(data["data"], columns=data["columns"])
