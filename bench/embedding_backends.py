"""The embedding floor: the packaged MiniLM under each backend, and the static embedder distilled
from it, on the HotpotQA dev500 paragraphs (../shared/data/hotpotqa_ircot_dev500), or with
`--dataset sample` on the chunks of the bundled sample as the default run makes them.

Per embedder: texts/s embedding the 4,858 paragraphs (the model's batches, longest first as
`Embedder.embed` makes them; export/distillation done before, timed apart as `prepare_s`), the
mean cosine of its paragraph vectors to PyTorch's, and ndcg@10 and mrr of `retriever=dense` on
the 500 questions, by the pipeline itself:

    python -m ragexp dataset=hotpotqa retriever=dense embedder=minilm embedder.backend=B \
        chunker.chunk_size=100000 chunker.chunk_overlap=0 embedder@scoring_embedder=hash tracker=none

(one chunk per paragraph, so the pipeline indexes exactly the timed paragraphs and takes their
vectors from the cache; the hash scoring embedder keeps the offline judge out of the timing).
On the sample: `python -m ragexp retriever=dense embedder.backend=B embedder@scoring_embedder=hash
tracker=none` (the default chunker; its chunks are the timed texts).

The default backend is the fastest of those the default install runs (no extra: numpy) whose vectors
are PyTorch's (mean cosine >= 0.999, ndcg@10 within 0.01); a backend that needs an extra is a choice
(docs/how-to/embedders.md).

    python bench/embedding_backends.py [numpy torch onnx onnx-int8 openvino static] [--dataset sample] [--cache-dir DIR]
    python bench/run.py embedding   (all six on HotpotQA; results.json and results.md keep them)"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HOTPOT = (ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500").resolve()
EMBEDDERS = ["numpy", "torch", "onnx", "onnx-int8", "openvino", "static"]
NO_EXTRA = ["numpy"]  # the backends `pip install ragexp` runs (the others need the torch extra, or torch and backends)
OPTIONS = {"static": ["embedder=static"]}  # the others: embedder=minilm embedder.backend=NAME
DATASET = {"hotpotqa": ["dataset=hotpotqa", f"dataset.path={HOTPOT}", "chunker=recursive", "chunker.chunk_size=100000",
                        "chunker.chunk_overlap=0"],  # one chunk per paragraph
           "sample": []}  # the bundled sample, chunked as the default run chunks it


def overrides(name: str, cache_dir: Path, dataset: str = "hotpotqa") -> list[str]:
    chosen = OPTIONS.get(name, ["embedder=minilm", f"embedder.backend={name}"])
    return [*DATASET[dataset], "retriever=dense", *chosen, "embedder@scoring_embedder=hash", "tracker=none",
            f"cache.dir={cache_dir}"]


def dataset_texts(dataset: str) -> list[str]:
    """The texts the pipeline indexes: HotpotQA's paragraphs, or the sample's chunks by the default chunker."""
    from hydra.utils import instantiate

    cfg = compose(overrides("numpy", Path(tempfile.gettempdir()), dataset))
    documents = instantiate(cfg.dataset).load().documents
    if dataset == "hotpotqa":
        return [d.text for d in documents]
    return [c.text for c in instantiate(cfg.chunker).chunk(documents)]


def compose(args: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=args)


def timed_embed(embedder, texts: list[str]) -> tuple[np.ndarray, float]:
    """The model's own work on `texts` (Embedder.embed's batches, no cache), and its seconds."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    vectors = np.zeros((len(texts), 0), dtype=np.float32)
    started = time.perf_counter()
    parts = []
    for start in range(0, len(order), embedder.batch_size):
        batch = [texts[i] for i in order[start : start + embedder.batch_size]]
        parts.append(np.asarray(embedder.embed_batch(batch), dtype=np.float32))
    seconds = time.perf_counter() - started
    stacked = np.concatenate(parts)
    stacked /= np.maximum(np.linalg.norm(stacked, axis=1, keepdims=True), 1e-12)
    vectors = np.zeros_like(stacked)
    vectors[order] = stacked
    return vectors, seconds


def prepare(name: str, cache_dir: Path, dataset: str = "hotpotqa"):
    """The embedder as `python -m ragexp` builds it with `cache.dir=cache_dir`, its model exported,
    distilled or loaded (timed as `prepare_s`); or the reason it does not fit."""
    from hydra.utils import instantiate

    from ragexp.store.embedding_store import EmbeddingStore
    from ragexp.components.embedders import EmbeddingCache

    with EmbeddingCache(EmbeddingStore(str(cache_dir))).building():
        embedder = instantiate(compose(overrides(name, cache_dir, dataset)).embedder)
    started = time.perf_counter()
    try:
        embedder.embed_batch(["warm up: export, distil or load the model"])
    except Exception as err:  # noqa: BLE001 - a backend that does not fit is reported, not fatal
        return None, {"embedder": name, "error": f"{type(err).__name__}: {err}".splitlines()[0][:300]}
    return embedder, {"embedder": name, "key": embedder.key(), "prepare_s": round(time.perf_counter() - started, 1)}


def quality(name: str, embedder, texts: list[str], cache_dir: Path, dataset: str = "hotpotqa") -> tuple[dict, np.ndarray]:
    """Embeds every paragraph (timed), stores the vectors, then runs the pipeline on them."""
    from ragexp.store.embedding_store import EmbeddingStore
    from ragexp.run.pipeline import run

    load = os.getloadavg()[0]
    vectors, seconds = timed_embed(embedder, texts)
    EmbeddingStore(str(cache_dir)).put(embedder.key(), texts, vectors)  # the pipeline indexes these from the cache
    result = run(compose(overrides(name, cache_dir, dataset)), f"embedding-{name}")
    return {"texts": len(texts), "dimension": int(vectors.shape[1]), "full_pass_s": round(seconds, 1),
            "full_pass_texts_per_s": round(len(texts) / seconds, 1),
            "full_pass_load_1min": round((load + os.getloadavg()[0]) / 2, 1),
            "ndcg_at_10": round(result.aggregates["ndcg_at_10"], 4), "mrr": round(result.aggregates["mrr"], 4),
            "questions": result.aggregates["total_questions"],
            "pipeline_index_embedded_texts": result.counters["index_embedded_texts"]}, vectors


def bench(names: list[str] = EMBEDDERS, cache_dir: Path | None = None, rounds: int = 2, sample: int = 480,
          dataset: str = "hotpotqa") -> dict:
    """Quality per embedder, then texts/s as the best of `rounds` interleaved passes over the same
    `sample` paragraphs (so a shared machine's load changes hit every embedder alike)."""
    if dataset == "hotpotqa" and not HOTPOT.exists():
        raise SystemExit(f"bench: {HOTPOT} not found (the benchmark reads ../shared/data)")
    cache_dir = cache_dir or Path(tempfile.mkdtemp(prefix="ragexp-bench-embedding-"))
    texts = dataset_texts(dataset)
    rows, ready, vectors = [], {}, {}
    for name in names:
        embedder, row = prepare(name, cache_dir, dataset)
        if embedder is not None:
            measured, vectors[name] = quality(name, embedder, texts, cache_dir, dataset)
            row.update(measured)
            ready[name] = embedder
        rows.append(row)
        print(json.dumps(row), flush=True)
    reference = vectors.get("torch")
    for row in rows:
        if reference is not None and row["embedder"] in vectors and vectors[row["embedder"]].shape == reference.shape:
            cosines = (vectors[row["embedder"]] * reference).sum(axis=1)
            row["mean_cosine_to_torch"], row["min_cosine_to_torch"] = round(float(cosines.mean()), 5), round(float(cosines.min()), 5)
    speed_texts = texts[:: max(1, len(texts) // sample)][:sample]
    for _ in range(rounds):
        for row in rows:
            if row["embedder"] in ready:
                load, done, seconds = os.getloadavg()[0], 0, 0.0
                while seconds < 2.0:  # a fast embedder passes over the sample several times
                    seconds += timed_embed(ready[row["embedder"]], speed_texts)[1]
                    done += len(speed_texts)
                if done / seconds > row.get("texts_per_s", 0):
                    row["texts_per_s"], row["load_1min"] = round(done / seconds, 1), round(load, 1)
    torch = next((r for r in rows if r["embedder"] == "torch" and "error" not in r), None)
    for row in rows:
        if torch and "error" not in row:
            row["speedup"] = round(row["texts_per_s"] / torch["texts_per_s"], 2)
            row["ndcg_delta"] = round(row["ndcg_at_10"] - torch["ndcg_at_10"], 4)
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{os.cpu_count()} cores", "rows": rows,
            "dataset": dataset, "speed": f"best of {rounds} interleaved passes over {len(speed_texts)} texts",
            "default": verdict(rows)}


def verdict(rows: list[dict]) -> str:
    """The rule for the default backend: the fastest MiniLM backend the default install runs (no extra)
    whose vectors are PyTorch's (mean cosine >= 0.999, ndcg@10 within 0.01)."""
    fits = [r for r in rows if r["embedder"] in NO_EXTRA and r.get("mean_cosine_to_torch", 0) >= 0.999
            and abs(r.get("ndcg_delta", 1)) <= 0.01]
    return max(fits, key=lambda r: r["texts_per_s"])["embedder"] if fits else "none measured"


def table(results: dict) -> str:
    every = next((f"{r['texts']:,}" for r in results["rows"] if "texts" in r), "")
    lines = [f"| embedder | texts/s | speedup | ndcg@10 | mrr | mean cosine to PyTorch | load | texts/s, all {every} (load) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results["rows"]:
        label = r["embedder"] if r["embedder"] == "static" else f"minilm, {r['embedder']}"
        if "error" in r:
            lines.append(f"| {label} | does not fit: {r['error']} | | | | | | |")
            continue
        lines.append(f"| {label} | {r['texts_per_s']} | {r.get('speedup', '')}x | {r['ndcg_at_10']} | {r['mrr']} | "
                     f"{r.get('mean_cosine_to_torch', '- (other space)')} | {r['load_1min']} | "
                     f"{r['full_pass_texts_per_s']} ({r['full_pass_load_1min']}) |")
    return "\n".join(lines) + f"\n\ntexts/s: {results['speed']} ({results['dataset']}); load: 1-minute load average of "\
        f"the 2-core machine\n\ndefault backend by the rule (no extra, mean cosine >= 0.999, ndcg@10 within 0.01): "\
        f"{results['default']}\n"


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="texts/s, ndcg@10 and mrr per embedder on HotpotQA dev500")
    parser.add_argument("embedders", nargs="*", help=f"some of {' '.join(EMBEDDERS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved speed passes (the best counts)")
    parser.add_argument("--dataset", choices=sorted(DATASET), default="hotpotqa",
                        help="HotpotQA's paragraphs (../shared/data) or the bundled sample's chunks")
    parser.add_argument("--cache-dir", type=Path, help="keep exports, the distilled model and vectors here "
                        "(default: a new temporary folder, so everything is prepared afresh)")
    args = parser.parse_args(argv)
    if set(args.embedders) - set(EMBEDDERS):
        parser.error(f"unknown embedders {sorted(set(args.embedders) - set(EMBEDDERS))}; choose from {EMBEDDERS}")
    print(table(bench(args.embedders or EMBEDDERS, args.cache_dir, args.rounds, dataset=args.dataset)))


if __name__ == "__main__":
    main(sys.argv[1:])
