"""Bench group `million`: ragexp's retrievers on 10^6 chunks and 1,000 queries, on this machine.

The corpus is made of real text found here, recombined deterministically (`build_corpus`):
- the 4,858 HotpotQA dev500 paragraphs and the 2,117 MS MARCO passages of ../shared/data, each one
  chunk, kept first and unchanged (the queries' golden chunks);
- then chunks of 2-5 sentences drawn with numpy's PCG64 (seed SEED) from the pool of their distinct
  sentences (split by `ragexp.base.text.split_sentences`), until 10^6 chunks.
The queries are the 500 HotpotQA questions and the first 500 MS MARCO queries. The sentences are
real, so are term frequencies within a chunk and the length of chunks (~450 characters); the
vocabulary is that of ~7,000 passages (~41,000 terms), much smaller than a real corpus of 10^6
chunks has, so each term's postings are longer than in real data: BM25 query time here errs on
the slow side, the vocabulary's memory on the small side.

Each figure is measured in a child process of its own (`python bench/million.py PART ...`, which
prints one JSON line), so its peak RSS (os.wait4) is that part's alone:
- bm25s: index 10^6 chunks, then the 1,000 queries 50 deep (the pipeline's metrics depth);
- rank_bm25: too slow for 1,000 queries here: its index, and QUERY_SAMPLE queries at 10^5 chunks,
  20 at 10^6, the query time extrapolated linearly to 1,000 (each query scans every chunk);
- bm25 at 10^5 chunks, both implementations (the default's >= 10x goal);
- static: embedder=static (the pipeline's DenseRetriever in Qdrant local mode) on 10^6 chunks:
  embedding, indexing, and DENSE_QUERY_SAMPLE queries extrapolated to 1,000 (local mode searches
  exhaustively, seconds per query at 10^6; a Qdrant server searches an HNSW graph instead);
- exact: embedder=static and retriever=dense_exact (the chunk vectors as one matrix) on 10^6 chunks:
  embedding (= indexing), all 1,000 queries, the peak RSS after each step; `--store DIR` with the
  run's on-disk embedding store (a first run writes it, a later one reads it);
- dense_memory: where dense retrieval's memory goes, by tracemalloc, at 10^5 chunks (`--retriever
  dense|dense_exact`);
- app: the whole `python -m ragexp` run with retriever=dense_exact and embedder=static on 10^6
  documents and 1,000 questions (stage cache on, offline generator and judge): peak RSS, stage times;
- minilm: MiniLM's texts/s on a sample of MINILM_SAMPLE chunks, extrapolated to 10^6 (said so);
- sweep_memory: peak RSS of `python -m ragexp -m retriever.top_k=...` with 1 and 3 jobs in one
  process (Hydra's basic launcher), retriever=bm25 and dense: a stage whose memory grows per job shows.

    python bench/run.py million            (all of it, into bench/results.json and bench/results/million.json)
    python bench/million.py all            (the same, printed)
    python bench/million.py bm25s --chunks 1000000   (one part, printed)

The load average is noted beside each figure: the machine is shared."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from ragexp.config.build import from_yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = (ROOT.parent / "shared" / "data").resolve()
SEED = 20261130
MILLION = 1_000_000
QUERY_SAMPLE = 100  # rank_bm25's queries at 10^5 chunks (20 at 10^6), extrapolated to 1,000
DENSE_QUERY_SAMPLE = 20  # Qdrant local mode's exact search over 10^6 vectors: seconds per query
MINILM_SAMPLE = 2_000
DEPTH = 50


def passages():
    """The real passages: (doc id, text) of HotpotQA dev500's paragraphs and MS MARCO's passages,
    and the questions: (query, golden doc ids), 500 of each, through ragexp's own loaders."""

    hotpot = from_yaml("dataset/hotpotqa", path=str(DATA / "hotpotqa_ircot_dev500")).load()
    marco = from_yaml("dataset/autorag_msmarco", path=str(DATA / "autorag_msmarco"), limit=500).load()
    docs = [(f"hotpotqa:{d.doc_id}", d.text) for d in hotpot.documents]
    docs += [(f"msmarco:{d.doc_id}", d.text) for d in marco.documents]
    questions = [(q.text, {f"hotpotqa:{g}" for g in q.golden}) for q in hotpot.questions]
    questions += [(q.text, {f"msmarco:{g}" for g in q.golden}) for q in marco.questions]
    return docs, questions


def build_corpus(n: int, seed: int = SEED):
    """`n` chunks: the real passages, then recombined sentences (see the module's docstring)."""
    from ragexp.base.text import split_sentences
    from ragexp.types import Chunk

    docs, _ = passages()
    chunks = [Chunk(doc_id, doc_id, text) for doc_id, text in docs][:n]
    pool = list(dict.fromkeys(s for _, text in docs for s in split_sentences(text)))
    rng = np.random.default_rng(seed)
    extra = n - len(chunks)
    sizes = rng.integers(2, 6, size=extra)
    picks = rng.integers(0, len(pool), size=int(sizes.sum())).tolist()
    at = 0
    for i, size in enumerate(sizes.tolist()):
        text = " ".join(pool[j] for j in picks[at : at + size])
        at += size
        chunks.append(Chunk(f"mix-{i}", f"mix-{i}", text))
    return chunks


def queries():
    _, questions = passages()
    return [q for q, _ in questions], [g for _, g in questions]


def clocked(work, *args):
    """`work(*args)`, its wall and CPU seconds: (result, wall_s, cpu_s)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = work(*args)
    return result, time.perf_counter() - started, time.process_time() - cpu


def hit_at(results, golden, k: int = 10) -> float:
    """The share of queries with a golden chunk among their first k hits."""
    return round(sum(any(h.chunk.doc_id in g for h in hits[:k]) for hits, g in zip(results, golden)) / len(golden), 3)


def part_bm25(impl: str, chunks_n: int, queries_n: int) -> dict:

    started = time.perf_counter()
    chunks = build_corpus(chunks_n)
    texts, golden = queries()
    texts, golden = texts[:queries_n], golden[:queries_n]
    built = time.perf_counter() - started
    retriever = from_yaml("retriever/bm25", impl=impl)  # type: ignore[arg-type]
    load = os.getloadavg()[0]
    _, index_s, index_cpu = clocked(retriever.index, chunks)
    results, search_s, search_cpu = clocked(retriever.search, texts, DEPTH)
    return {"impl": impl, "chunks": len(chunks), "queries": len(texts), "corpus_build_s": round(built, 1),
            "index_s": round(index_s, 1), "index_cpu_s": round(index_cpu, 1), "search_s": round(search_s, 2),
            "search_cpu_s": round(search_cpu, 2),
            "ms_per_query": round(1000 * search_s / len(texts), 2), "hit_at_10": hit_at(results, golden),
            "load_1min_start": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1)}


def part_static(chunks_n: int, queries_n: int, cache_dir: str) -> dict:
    """embedder=static and retriever=dense (Qdrant local mode, in memory) as the pipeline runs
    them: embedding every chunk, indexing, then `queries_n` queries."""
    from ragexp.components.embedders import EmbeddingCache

    chunks = build_corpus(chunks_n)
    texts, golden = queries()
    texts, golden = texts[:queries_n], golden[:queries_n]
    with EmbeddingCache().building():
        embedder = from_yaml("embedder/static", model_dir=str(Path(cache_dir) / "models"))
    embedder.embed(["warm up: distil or load the model"])
    load = os.getloadavg()[0]
    _, embed_s, embed_cpu = clocked(embedder.embed, [c.text for c in chunks])  # kept in the run's memo, as the pipeline does
    retriever = from_yaml("retriever/dense", embedder=embedder, top_k=5)
    _, index_s, index_cpu = clocked(retriever.index, chunks)
    results, search_s, search_cpu = clocked(retriever.search, texts, DEPTH)
    return {"chunks": len(chunks), "queries": len(texts), "embed_s": round(embed_s, 1), "embed_cpu_s": round(embed_cpu, 1),
            "qdrant_index_s": round(index_s, 1), "qdrant_index_cpu_s": round(index_cpu, 1), "search_s": round(search_s, 1),
            "search_cpu_s": round(search_cpu, 1),
            "ms_per_query": round(1000 * search_s / len(texts), 1), "hit_at_10": hit_at(results, golden),
            "load_1min_start": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1)}


def rss_mb() -> int:
    """This process's peak RSS so far (ru_maxrss), MB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def part_exact(chunks_n: int, queries_n: int, cache_dir: str, store: str | None = None) -> dict:
    """embedder=static and retriever=dense_exact as the pipeline runs them: `index` embeds every
    chunk (the matrix is the embedder's output), then `queries_n` queries; the peak RSS after each
    step. With `store` (a folder), the run's on-disk embedding store is there, as with the stage
    cache on: a first run writes every vector to it, a later one reads them instead of embedding."""
    from ragexp.components.embedders import EmbeddingCache
    from ragexp.store.embedding_store import EmbeddingStore

    chunks = build_corpus(chunks_n)
    texts, golden = queries()
    texts, golden = texts[:queries_n], golden[:queries_n]
    rss_corpus = rss_mb()
    embeddings = EmbeddingCache(EmbeddingStore(store) if store else None)
    with embeddings.building():
        embedder = from_yaml("embedder/static", model_dir=str(Path(cache_dir) / "models"))
    embedder.embed(["warm up: distil or load the model"])
    rss_model = rss_mb()
    load = os.getloadavg()[0]
    retriever = from_yaml("retriever/dense_exact", embedder=embedder, top_k=5)
    _, index_s, index_cpu = clocked(retriever.index, chunks)
    rss_index = rss_mb()
    results, search_s, search_cpu = clocked(retriever.search, texts, DEPTH)
    return {"chunks": len(chunks), "queries": len(texts), "embed_and_index_s": round(index_s, 1),
            "embed_and_index_cpu_s": round(index_cpu, 1), "search_s": round(search_s, 1),
            "search_cpu_s": round(search_cpu, 1), "ms_per_query": round(1000 * search_s / len(texts), 1),
            "hit_at_10": hit_at(results, golden), "matrix_mb": round(retriever.vectors.nbytes / 2**20),
            "store": store, "embedded_texts": embeddings.stats["embedded_texts"],
            "peak_rss_mb_after": {"corpus": rss_corpus, "model": rss_model, "index": rss_index, "search": rss_mb()},
            "load_1min_start": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1)}


def part_dense_memory(chunks_n: int, cache_dir: str, retriever_name: str) -> dict:
    """Where a dense retriever's memory goes, by tracemalloc (Python objects and numpy arrays; MB
    held after each step, and the highest point within it) on `chunks_n` chunks, 20 queries."""
    import tracemalloc

    from ragexp.components.embedders import EmbeddingCache

    with EmbeddingCache().building():
        embedder = from_yaml("embedder/static", model_dir=str(Path(cache_dir) / "models"))
    embedder.embed(["warm up: distil or load the model"])
    texts = queries()[0][:20]
    tracemalloc.start()
    steps: dict = {}

    def step(name: str, work):
        tracemalloc.reset_peak()
        value = work()
        current, peak = tracemalloc.get_traced_memory()
        steps[name] = {"held_mb": round(current / 2**20), "peak_mb": round(peak / 2**20)}
        return value

    chunks = step("corpus (Chunk objects)", lambda: build_corpus(chunks_n))
    if retriever_name == "dense":  # as part_static: the chunks embedded first (the memo), then indexed
        step("embed (the run's memo)", lambda: embedder.embed([c.text for c in chunks]))
        retriever = from_yaml("retriever/dense", embedder=embedder, top_k=5)
    else:
        retriever = from_yaml("retriever/dense_exact", embedder=embedder, top_k=5)
    step("index", lambda: retriever.index(chunks))
    step("20 queries", lambda: retriever.search(texts, DEPTH))
    tracemalloc.stop()
    return {"retriever": retriever_name, "chunks": chunks_n, "tracemalloc": steps}


def part_minilm(sample: int) -> dict:

    chunks = build_corpus(10_000 + sample)[-sample:]  # recombined chunks, of the corpus's typical length
    embedder = from_yaml("embedder/minilm")
    embedder.embed_batch(["warm up: load the model"])
    load = os.getloadavg()[0]
    _, seconds, cpu = clocked(embedder.embed, [c.text for c in chunks])
    per_s = sample / seconds
    return {"sample": sample, "embed_s": round(seconds, 1), "embed_cpu_s": round(cpu, 1), "texts_per_s": round(per_s, 1),
            "extrapolated_1e6_h": round(MILLION / per_s / 3600, 1), "load_1min_start": round(load, 1),
            "load_1min_end": round(os.getloadavg()[0], 1)}


PARTS = {"bm25s", "rank_bm25", "static", "exact", "dense_memory", "minilm", "corpus"}


def child(part: str, *args: str) -> dict:
    """One part in a child process: its JSON line (with its own peak RSS) and wall time."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), part, *args], capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"})
    if proc.returncode:
        raise SystemExit(f"bench million: {part} {' '.join(args)} failed:\n{proc.stderr.decode()[-3000:]}")
    figures = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    return figures


def peak_rss_child(argv: list[str], cwd: Path) -> tuple[int, float, str]:
    """Exit code, peak RSS (MB) and stderr of a command (os.wait4 of that child alone)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "TQDM_DISABLE": "1"})
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_maxrss / 1024, err


def write_dataset(folder: Path, chunks_n: int, questions_n: int) -> None:
    """The corpus (one document per chunk of `build_corpus`) and `questions_n` questions as dataset=jsonl reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    texts, golden = queries()
    with open(folder / "corpus.jsonl", "w") as out:
        for c in build_corpus(chunks_n):
            out.write(json.dumps({"doc_id": c.doc_id, "text": c.text}) + "\n")
    with open(folder / "questions.jsonl", "w") as out:
        for i, (text, gold) in enumerate(zip(texts[:questions_n], golden[:questions_n])):
            out.write(json.dumps({"id": f"q{i}", "question": text, "answer": "x", "golden_docs": sorted(gold)}) + "\n")


def app_run(work_dir: Path, chunks_n: int, questions_n: int, cache_dir: str) -> dict:
    """The whole `python -m ragexp` run with retriever=dense_exact and embedder=static on `chunks_n`
    documents of one chunk each and `questions_n` questions (dataset=jsonl, the stage cache on in a
    fresh folder, the extractive generator, the offline judge with embedder@scoring_embedder=hash):
    its peak RSS (os.wait4) and the stage times it logs in its run folder."""
    folder = work_dir / f"app-{chunks_n}"
    if not (folder / "questions.jsonl").exists():
        write_dataset(folder, chunks_n, questions_n)
    run_dir, stage_cache = work_dir / f"app-run-{chunks_n}", work_dir / f"app-cache-{chunks_n}"
    argv = [sys.executable, "-m", "ragexp", "dataset=jsonl", f"dataset.path={folder}", "retriever=dense_exact",
            "embedder=static", f"embedder.model_dir={Path(cache_dir).resolve() / 'models'}",
            "embedder@scoring_embedder=hash", "tracker=none", f"cache.dir={stage_cache}", f"hydra.run.dir={run_dir}"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    code, rss, err = peak_rss_child(argv, work_dir)
    if code != 0:
        raise SystemExit(f"bench million: the app run failed ({code}):\n{err[-3000:]}")
    run = json.loads((run_dir / "run.json").read_text())
    return {"documents": chunks_n, "questions": questions_n, "peak_rss_mb": round(rss),
            "wall_s": round(time.perf_counter() - started, 1), "timings_s": run.get("timings_s"), "work": run.get("work"),
            "load_1min_start": round(load, 1), "load_1min_end": round(os.getloadavg()[0], 1)}


def sweep_memory(work_dir: Path, chunks_n: int = 30_000, jobs: tuple[int, ...] = (1, 3)) -> dict:
    """Peak RSS of sweeps of 1 and 3 jobs in one process (Hydra's basic launcher runs them one
    after the other in the same process), for retriever=bm25 and retriever=dense (embedder=hash),
    stage cache off so every job does all its stages; 50 questions, `chunks_n` documents."""
    folder = work_dir / "corpus"
    write_dataset(folder, chunks_n, 50)
    figures: dict = {"documents": chunks_n, "questions": 50}
    for retriever in ("bm25", "dense"):
        for n in jobs:
            top_ks = ",".join(str(5 + j) for j in range(n))  # jobs that differ, each doing all its work
            argv = [sys.executable, "-m", "ragexp", "-m", "dataset=jsonl", f"dataset.path={folder}",
                    f"retriever={retriever}", f"retriever.top_k={top_ks}", "embedder=hash",
                    "embedder@scoring_embedder=hash", "tracker=none", "cache.enabled=false",
                    f"hydra.sweep.dir={work_dir / f'sweep-{retriever}-{n}'}"]
            load = os.getloadavg()[0]
            started = time.perf_counter()
            code, rss, err = peak_rss_child(argv, work_dir)
            if code != 0:
                raise SystemExit(f"bench million: the {n}-job {retriever} sweep failed ({code}):\n{err[-3000:]}")
            figures[f"{retriever}_{n}_jobs"] = {"peak_rss_mb": round(rss), "wall_s": round(time.perf_counter() - started),
                                                "load_1min_start": round(load, 1)}
    return figures


def measure(work_dir: Path, args) -> dict:
    """Every part (see the docstring), each in a child process; written to bench/results/million.json
    part by part as they end."""
    n = str(MILLION)
    out = ROOT / "bench" / "results" / "million.json"
    out.parent.mkdir(exist_ok=True)
    plan = {
        "bm25s_1e6": lambda: child("bm25s", "--chunks", n, "--queries", "1000"),
        "bm25s_1e5": lambda: child("bm25s", "--chunks", "100000", "--queries", "1000"),
        "rank_bm25_1e5": lambda: extrapolated(child("rank_bm25", "--chunks", "100000", "--queries", str(QUERY_SAMPLE))),
        "rank_bm25_1e6": lambda: extrapolated(child("rank_bm25", "--chunks", n, "--queries", "20")),
        "minilm_sample": lambda: child("minilm", "--sample", str(MINILM_SAMPLE)),
        "sweep_memory": lambda: sweep_memory(work_dir),
        "static_1e6": lambda: extrapolated(child("static", "--chunks", n, "--queries", str(DENSE_QUERY_SAMPLE),
                                                 "--cache-dir", str(work_dir / "cache"))),
        "exact_1e6": lambda: child("exact", "--chunks", n, "--queries", "1000", "--cache-dir", str(work_dir / "cache")),
        "dense_memory_1e5": lambda: {r: child("dense_memory", "--chunks", "100000", "--retriever", r,
                                              "--cache-dir", str(work_dir / "cache")) for r in ("dense", "dense_exact")},
        "app_1e6": lambda: app_run(work_dir, MILLION, 1000, str(work_dir / "cache")),
    }
    figures: dict = {}
    for name, part in plan.items():
        if args is not None and getattr(args, "million_parts", None) and name not in args.million_parts:
            continue
        figures[name] = part()
        out.write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def extrapolated(figures: dict, to: int = 1000) -> dict:
    """The query time of `to` queries from a sample's (linear: each query of rank_bm25 and of Qdrant's
    local mode scans every chunk)."""
    figures["search_s_extrapolated_1000"] = round(figures["search_s"] * to / figures["queries"], 1)
    figures["search_cpu_s_extrapolated_1000"] = round(figures["search_cpu_s"] * to / figures["queries"], 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=sorted(PARTS | {"sweep_memory", "app", "all"}))
    parser.add_argument("--chunks", type=int, default=MILLION)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=MINILM_SAMPLE)
    parser.add_argument("--cache-dir", default=".ragexp-cache")
    parser.add_argument("--store", default=None, help="exact: keep the vectors in an embedding store in this folder")
    parser.add_argument("--retriever", choices=["dense", "dense_exact"], default="dense_exact",
                        help="dense_memory: the retriever whose memory is traced")
    parser.add_argument("--work-dir", type=Path, default=Path("million-work"))
    args = parser.parse_args()
    if args.part in ("bm25s", "rank_bm25"):
        figures = part_bm25(args.part, args.chunks, args.queries)
    elif args.part == "static":
        figures = part_static(args.chunks, args.queries, args.cache_dir)
    elif args.part == "exact":
        figures = part_exact(args.chunks, args.queries, args.cache_dir, args.store)
    elif args.part == "dense_memory":
        figures = part_dense_memory(args.chunks, args.cache_dir, args.retriever)
    elif args.part == "minilm":
        figures = part_minilm(args.sample)
    elif args.part == "sweep_memory":
        figures = sweep_memory(args.work_dir)
    elif args.part == "app":
        figures = app_run(args.work_dir, args.chunks, args.queries, args.cache_dir)
    elif args.part == "all":
        figures = measure(args.work_dir, None)
    else:
        started = time.perf_counter()
        chunks = build_corpus(args.chunks)
        figures = {"chunks": len(chunks), "build_s": round(time.perf_counter() - started, 1),
                   "mean_chars": round(sum(len(c.text) for c in chunks) / len(chunks))}
    figures.setdefault("peak_rss_mb", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))  # app: its child's
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
