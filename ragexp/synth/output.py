"""The dataset folder a synth run writes, loadable by `dataset=synthetic` or `dataset=jsonl`
as it is: `questions.jsonl`, `corpus.jsonl`, plus `rejections.jsonl` (every rejected candidate
with its rule) and `synth.json` (the run's counts and settings)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ragexp.synth.build import SynthResult
from ragexp.synth.candidates import Candidate
from ragexp.types import Document


def question_record(n: int, candidate: Candidate) -> dict:
    """One line of questions.jsonl. `answer` is the answer, followed by the evidence quotes when
    they differ from it (verbatim source text: `relevance=span` finds the source chunks by them)."""
    answers = list(dict.fromkeys([candidate.answer, *candidate.evidence]))
    return {
        "id": f"synth-{n:04d}",
        "question": candidate.question,
        "answer": answers[0] if len(answers) == 1 else answers,
        "golden_docs": candidate.source.doc_ids,
        "type": candidate.source.type,
        "source": "synthetic",
        "generator": candidate.generator,
        "prompt_hash": candidate.prompt_hash,
        "evidence": list(candidate.evidence),
        "source_chunks": [{"chunk_id": c.chunk_id, "doc_id": c.doc_id, "start": c.start, "end": c.end, "text": c.text}
                          for c in candidate.source.chunks],
    }


def write_jsonl(path: Path, records) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(temporary, path)


def write_dataset(folder: str | Path, result: SynthResult, documents: Sequence[Document], summary: dict) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "questions.jsonl", (question_record(n, c) for n, c in enumerate(result.kept, start=1)))
    write_jsonl(folder / "corpus.jsonl", ({"doc_id": d.doc_id, "title": d.title, "text": d.text} for d in documents))
    write_jsonl(folder / "rejections.jsonl", (r.record() for r in result.rejections))
    (folder / "synth.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return folder


def load_written(folder: Path):
    """The folder read back as `dataset=synthetic` reads it (for its fingerprint)."""
    from ragexp.config.build import from_yaml

    return from_yaml("dataset/synthetic", path=str(folder)).load()
