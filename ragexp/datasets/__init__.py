"""Dataset loaders: each turns files into a `Dataset` (documents + golden questions)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterator

from ragexp.errors import RagexpError
from ragexp.types import Dataset


def existing_path(path: str | Path, setting: str) -> Path:
    """`path` as an absolute Path, or an error naming the setting to change."""
    resolved = Path(path).expanduser().resolve()
    if not resolved.exists():
        raise RagexpError(f"{setting}: {path} does not exist (looked for {resolved}); set {setting}=/path/to/it")
    return resolved


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a line that is not a JSON object names file:line."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise RagexpError(f"{path}:{number}: not valid JSON ({err.msg}, column {err.colno})") from None
            if not isinstance(row, dict):
                raise RagexpError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            yield number, row


def corpus_fingerprint(documents) -> str:
    """A hash of the documents alone (what chunking depends on)."""
    digest = hashlib.sha256()
    for doc in documents:
        digest.update(f"D\0{doc.doc_id}\0{doc.text}\0".encode())
    return digest.hexdigest()


def fingerprint(dataset: Dataset) -> str:
    """A short hash of the corpus and questions: the same data gives the same fingerprint."""
    digest = hashlib.sha256(corpus_fingerprint(dataset.documents).encode())
    for q in dataset.questions:
        digest.update(f"Q\0{q.qid}\0{q.text}\0{json.dumps(q.answers)}\0{json.dumps(sorted(q.golden.items()))}\0".encode())
    return digest.hexdigest()[:16]
