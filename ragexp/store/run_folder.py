"""A run folder: results.json, aggregates.json, the per-question table and the audit trail
(questions.jsonl, TREC files), written with or without a tracker and logged by the trackers."""
from __future__ import annotations

from collections import Counter
import json
import math
import os
import time
from pathlib import Path

from ragexp.base.processes import this_process
from ragexp.types import RunResult
from ragexp import __version__
from ragexp.store.provenance import git_commit
from ragexp.store.tracing import TRACES
from ragexp.base.names import metric_key

AGGREGATES = "aggregates.json"


def results_json(result: RunResult) -> dict:
    """The specification's example shape: {"<run name>": {aggregates..., "judge": ...}}; with
    `not_judged` when some metric was left out of some judged questions: metric -> why, and for how
    many (an answer given without contexts has no faithfulness: ragexp.judges.contract.context_free)."""
    judged = [r.judgement for r in result.questions if r.judgement is not None]
    left_out = Counter((m, why) for j in judged for m, why in j.details.get("not_judged", {}).items())
    not_judged = {m: f"{why} ({n} of {len(judged)} judged questions)" for (m, why), n in sorted(left_out.items())}
    return {result.name: {**result.aggregates, "judge": result.judge, **({"not_judged": not_judged} if not_judged else {})}}


def aggregates_json(result: RunResult) -> dict:
    """How each aggregate of results.json is made from the per-question table (see
    ragexp.metrics.scoring.Aggregate); `python -m ragexp.compare` reads it to recompute them."""
    return {"run": result.name, "aggregates": [a.to_json() for a in result.aggregation]}


TABLE, RUN_META = "questions.json", "run.json"


def json_value(value):
    """`value` with every NaN or infinite float as None (null): JSON has no NaN, and MLflow's UI reads
    the table as JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value


RESULTS = "results.json"  # written last, whole or absent: a folder with it is complete


def write_results(result: RunResult, folder: Path, started: float | None = None, failure: str | None = None,
                  tags: dict[str, str] | None = None) -> Path:
    """The run folder's files (`write_run_files`), then results.json (`seal`); returns its path."""
    write_run_files(result, folder, started, failure, tags)
    return seal(result, folder)


def write_run_files(result: RunResult, folder: Path, started: float | None = None, failure: str | None = None,
                    tags: dict[str, str] | None = None, options: dict[str, str] | None = None) -> None:
    """Everything of the run folder but results.json: aggregates.json, the audit trail
    (`write_audit`), the per-question table (`questions.json`, as MLflow stores a table) and
    `run.json` (what a tracker logs besides: tags, work and time counts; `started`: when the job
    began, time.time(); `failure`: why the run failed as a whole; `tags`: the sweep's own tags for
    the job; `options`: the option chosen in each config group, Hydra's runtime choices). Everything a tracker logs is then in the folder, so it can be logged later
    (`python -m ragexp.track FOLDER`). An OSError (a full disk) is raised as it comes: the
    folder then has no results.json, which `seal` writes last."""

    (folder / AGGREGATES).write_text(json.dumps(aggregates_json(result), indent=2) + "\n")
    write_audit(result, folder)
    table = question_table(result)
    columns = list(table)
    rows = [[json_value(v) for v in values] for values in zip(*table.values())] if table else []
    (folder / TABLE).write_text(json.dumps({"columns": columns, "data": rows}, default=str, allow_nan=False) + "\n")
    if result.traces:  # tracing=on: the tracker logs them as MLflow traces (ragexp.store.trace_store)

        with (folder / TRACES).open("w", encoding="utf-8") as out:
            for trace in result.traces:
                out.write(json.dumps(trace, ensure_ascii=False, default=str) + "\n")

    meta = {"name": result.name, "judge": result.judge, "dataset_fingerprint": result.dataset_fingerprint,
            "ragexp_version": __version__, "git_commit": git_commit(), "statuses": result.statuses,
            "gate": result.gate.name if result.gate is not None else None,
            "scales": {k: list(v) for k, v in result.scales.items()},  # of the aggregates (a gate's rules, in MLflow's terms)
            "work": result.counters, "timings_s": result.timings, "failure": failure,
            "started": started, "job_time_s": round(time.time() - started, 2) if started else None,
            "process": this_process(),  # the job's (a helper may log the folder: ragexp.store.log_ahead)
            **({"tags": tags} if tags else {}), **({"options": options} if options else {})}
    (folder / RUN_META).write_text(json.dumps(meta, indent=2) + "\n")


def seal(result: RunResult, folder: Path) -> Path:
    """results.json, the run folder's last file, written whole or not at all (a temporary file
    renamed): a folder that has it has every other file of the run (never results.json without
    run.json, whatever stops the writing)."""
    path = folder / RESULTS
    partial = folder / f".{RESULTS}.{os.getpid()}"
    try:
        partial.write_text(json.dumps(results_json(result), indent=2) + "\n")
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)
    return path


FIRST_STAGE_RUN = "first_stage.trec"  # with a reranker: the retriever's own ranking, beside the reranked run.trec
AUDIT_FILES = ("questions.jsonl", "run.trec", "qrels.trec", "retrieval.json", FIRST_STAGE_RUN)
MAP_POINTS, MAP_IMAGE = "embedding_map.json", "embedding_map.png"  # where retrieval fails (ragexp.run.embedding_map)
MAP_FILES = (MAP_POINTS, MAP_IMAGE)


def question_record(r) -> dict:
    """Everything about one question that the run's numbers come from."""
    j = r.judgement
    return {
        "question_id": r.question.qid, "question": r.question.text, "kind": r.question.kind,
        "source": r.question.source, "expected_answers": list(r.question.answers),
        "answerable": r.question.answerable, "golden": r.question.golden,
        "ranking": [{"rank": h.rank, "chunk_id": h.chunk.chunk_id, "doc_id": h.chunk.doc_id, "score": h.score}
                    for h in r.ranked],
        "scored_items": list(r.ranking), "judged": r.judged,
        "context": [{"chunk_id": h.chunk.chunk_id, "doc_id": h.chunk.doc_id, "text": h.chunk.text} for h in r.hits],
        "answer": r.answer.text if r.answer else None,
        "status": r.status, "failure_reason": r.failure, **({"attributes": r.question.attributes} if r.question.attributes else {}),
        **({"id_from_row": True} if r.question.id_from_row else {}),
        "judge_scores": j.scores if j else None, "hallucination": j.hallucination if j else None,
        "reasoning": j.reasoning if j else "", "judge_details": j.details if j else {},
        "answer_metrics": r.generation, "retrieval_metrics": r.retrieval, "retrieval_excluded": r.retrieval_excluded,
        **(first_stage_record(r) if r.first_stage is not None else {}),
    }


def first_stage_record(r) -> dict:
    """A reranked question's first-stage ranking and its metrics, and how long its reranking took."""
    first = r.first_stage
    return {"first_stage": {"ranking": [{"rank": h.rank, "chunk_id": h.chunk.chunk_id, "doc_id": h.chunk.doc_id,
                                         "score": h.score} for h in first.ranked],
                            "scored_items": list(first.ranking), "retrieval_metrics": first.retrieval},
            "rerank_s": r.rerank_s}


def write_audit(result: RunResult, folder: Path) -> list[Path]:
    """The run folder as its own audit trail: `questions.jsonl` (per question: the full ranking the
    retrieval metrics saw, the context the generator saw, the answer, every score and the judge's
    reasoning), and the TREC files the retrieval metrics amount to: `run.trec` (each scored question's
    ranking; the score column is depth - rank + 1, so trec_eval keeps the run's order) and `qrels.trec`
    (the judgements used), with `retrieval.json` (relevance level, NDCG gain, the logged means). With a
    reranker, run.trec is the reranked ranking (the one the logged means are of) and `first_stage.trec`
    the retriever's own, its means under `first_stage` in retrieval.json.
    `python -m ragexp.trec_eval --check FOLDER` recomputes every logged retrieval mean from them."""
    from ragexp.metrics.relevance import CONTEXT_METRICS

    paths = [folder / name for name in AUDIT_FILES[:4]]
    with paths[0].open("w", encoding="utf-8") as out:
        for r in result.questions:
            out.write(json.dumps(question_record(r), ensure_ascii=False, default=str) + "\n")
    scored = [r for r in result.questions if r.retrieval and r.ranking]
    tag = "".join(c if c.isalnum() or c in "-_." else "_" for c in result.name) or "ragexp"
    firsts = [(trec_id(r.question.qid), f) for r in result.questions
              if (f := r.first_stage) is not None and f.retrieval and f.ranking]  # scored in the first stage
    with paths[1].open("w", encoding="utf-8") as run:
        for r in scored:
            write_ranking(run, trec_id(r.question.qid), r.ranking, tag)
    judged: dict[str, dict[str, int]] = {}  # the judgements of both rankings (the same, for the doc rule)
    for qid, items in [*((trec_id(r.question.qid), r.judged) for r in scored), *((qid, f.judged) for qid, f in firsts)]:
        judged.setdefault(qid, {}).update(items)
    with paths[2].open("w", encoding="utf-8") as qrels:
        for qid, items in judged.items():
            qrels.writelines(f"{qid} 0 {trec_id(item)} {grade}\n" for item, grade in items.items())
    names = [n for n in dict.fromkeys(n for r in scored for n in r.retrieval) if n not in CONTEXT_METRICS]
    logged = {n: result.aggregates[metric_key(n)] for n in names if metric_key(n) in result.aggregates}
    spec = {**result.relevance, "questions_scored": len(scored), "logged": logged}
    if firsts:  # a reranked run: the first stage's ranking and its means, recomputed by --check too
        with (folder / FIRST_STAGE_RUN).open("w", encoding="utf-8") as run:
            for qid, first in firsts:
                write_ranking(run, qid, first.ranking, f"{tag}-first_stage")
        means = {n: round(sum(f.retrieval[n] for _, f in firsts) / len(firsts), 4) for n in logged
                 if all(n in f.retrieval for _, f in firsts)}
        spec["first_stage"] = {"run": FIRST_STAGE_RUN, "questions_scored": len(firsts), "logged": means}
        paths.append(folder / FIRST_STAGE_RUN)
    else:
        (folder / FIRST_STAGE_RUN).unlink(missing_ok=True)
    paths[3].write_text(json.dumps({**spec, "check": "python -m ragexp.trec_eval --check ."}, indent=2) + "\n")
    return paths


def write_ranking(out, qid: str, ranking, tag: str) -> None:
    """One question's ranking as TREC run lines; the score column is depth - rank + 1, so trec_eval
    keeps the run's order."""
    for rank, item in enumerate(ranking, start=1):
        out.write(f"{qid} Q0 {trec_id(item)} {rank} {len(ranking) - rank + 1} {tag}\n")


def trec_id(text: str) -> str:
    """An id as one whitespace-free TREC field."""
    return "_".join(str(text).split()) or "_"


def question_table(result: RunResult) -> dict[str, list]:
    """One row per question (column -> values), for `mlflow.log_table`."""
    rows = []
    metrics = list(dict.fromkeys(m for r in result.questions if r.judgement for m in r.judgement.scores))
    details = list(dict.fromkeys(k for r in result.questions if r.judgement for k in r.judgement.details))
    answer_metrics = list(dict.fromkeys(m for r in result.questions for m in r.generation))
    retrieval = list(dict.fromkeys(m for r in result.questions for m in r.retrieval))
    attributes = list(dict.fromkeys(a for r in result.questions for a in r.question.attributes))
    made_ids = any(r.question.id_from_row for r in result.questions)  # a column only then
    for r in result.questions:
        j = r.judgement
        rows.append({
            "question_id": r.question.qid,
            "question": r.question.text,
            "kind": r.question.kind,
            "source": r.question.source,
            **{column: r.question.attributes.get(column) for column in attributes},
            "expected_answer": r.question.expected,
            "generated_answer": r.answer.text if r.answer else "",
            "golden_doc_ids": json.dumps(sorted(r.question.golden)),
            "retrieved_chunk_ids": json.dumps([h.chunk.chunk_id for h in r.hits]),
            "retrieved_chunks": json.dumps([h.chunk.text for h in r.hits]),
            "judge": result.judge,
            **{metric: (j.scores.get(metric) if j else None) for metric in metrics},
            "hallucination": j.hallucination if j else None,
            "reasoning": j.reasoning if j else "",
            **{key: cell(j.details.get(key)) if j else None for key in details},
            **{metric: r.generation.get(metric) for metric in answer_metrics},
            **{metric_key(name): r.retrieval.get(name) for name in retrieval},
            "retrieval_excluded": r.retrieval_excluded,
            "status": r.status,
            "failure_reason": r.failure,
            **({"id_from_row": r.question.id_from_row} if made_ids else {}),
        })
    return {column: [row[column] for row in rows] for column in rows[0]} if rows else {}


def cell(value):
    """A judge's detail as a table cell: lists and objects as JSON text."""
    return json.dumps(value) if isinstance(value, (list, dict, tuple)) else value


# a sweep's files, shared by its callback, its jobs and the racing sweeper
FAILURE_FILE = "failure.json"  # in a failed sweep job's folder: its name, reason and exit status
SWEEP_FILE = "sweep.json"  # in the sweep folder: the parent run id, the swept keys, the tracker store


def read_sweep(sweep_dir: str | Path) -> dict:
    """What the callback left for the jobs of a multirun: parent run id, swept keys, tracker store."""
    path = Path(sweep_dir) / SWEEP_FILE
    return json.loads(path.read_text()) if path.exists() else {}
