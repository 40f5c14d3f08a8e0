"""Figure group `deadlines` (python bench/run.py deadlines): what the whole-attempt deadline and the
reply cap cost and hold, against the OpenAI-protocol test server (tests/openai_server.py).

- latency: two sequential chat requests through ragexp's client to the server at 200 ms (the
  server's own handling counted, as in the next figure), and the triad judging 8 questions at once
  (4 requests each in two rounds: 32 requests, all in flight), in one process with the server:
  goal, within 15% of the two round trips; medians of RUNS (11) runs each, alternating (one run
  of either is noisy: 0.455-0.52 s for the triad on an idle machine);
- the same judging as a user runs it: `python -m ragexp judge=triad weights=triad
  judge.endpoint.max_concurrency=32 retriever=bm25 dataset.limit=8 tracker=none cache.enabled=false`
  in a process of its own against `tests/openai_server.py --latency 0.2` run as a script, its
  judging stage's seconds read from its `judging:` log line (the pipeline's judging stage: keys,
  the stage cache's checks, embedding ahead), median of CLI_RUNS (5); goal, within 15% of the two
  round trips, with the load noted;
- dribble: a reply written a byte a second (status line and headers too) with `timeout_s=2` and no
  retry, per door (judge, generator, embeddings, system=http, the monitor's webhook with
  `webhook_timeout_s=2`): seconds until the request fails (goal: < 3 s);
- size: a 50 MB reply to a judge request, in a process of its own: its peak RSS with the default
  `max_reply_bytes` (10 MB: the question fails) and with the cap raised to 100 MB (read whole)."""
from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from ragexp.config.build import from_yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = 11
CLI_RUNS = 5
TRIAD_CLI = ("judge=triad", "weights=triad", "judge.endpoint.max_concurrency=32", "retriever=bm25", "dataset.limit=8",
             "tracker=none", "cache.enabled=false", "judge.endpoint.api_key_env=null")
sys.path.insert(0, str(ROOT / "tests"))

HUGE_CLIENT = """
import json, resource, sys
from ragexp.llm.client import ChatClient, ChatRequest
from ragexp.config.build import from_yaml
from ragexp.llm.usage import Prices, Usage
from ragexp.errors import QuestionFailed
settings = json.loads(sys.argv[2])
endpoint = from_yaml("endpoint/openai", base_url=sys.argv[1], model="m", api_key_env=None, max_retries=0, **settings)
client = ChatClient(endpoint, "judge", "k", Usage(), Prices({}))
try:
    outcome = "read %d characters" % len(client.complete(ChatRequest((("user", "q"),)), use_cache=False).text)
except QuestionFailed as err:
    outcome = str(err)
except Exception as err:
    outcome = type(err).__name__ + ": " + str(err)[:200]
print(json.dumps({"outcome": outcome, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def round_trips(server):
    """A function timing two sequential chat requests through one client (its connection made)."""
    from ragexp.llm.client import ChatClient, ChatRequest
    from ragexp.llm.usage import Prices, Usage

    client = ChatClient(from_yaml("endpoint/openai", base_url=server.base_url, model="m", api_key_env=None), "judge", "k", Usage(), Prices({}))
    ask = ChatRequest((("user", "Which port?"),))
    client.complete(ask, use_cache=False)  # the connection made

    def pair() -> float:
        started = time.perf_counter()
        client.complete(ask, use_cache=False)
        client.complete(ask, use_cache=False)
        return time.perf_counter() - started
    return pair


class WebhookFailed(Exception):
    pass


def webhook(server, timeout_s: float = 10.0):
    """The monitor's webhook door (ragexp.monitor.alerts.post), one attempt, as the other doors' requests."""
    from ragexp.monitor.alerts import post

    def send():
        delivered, _, error = post(server.base_url + "/answer", {"alerts": []}, retries=0, timeout_s=timeout_s)
        if not delivered:
            raise WebhookFailed(error)
        return delivered
    return send


def dribbled(server) -> dict:
    from test_deadlines import DOORS

    seconds = {}
    doors = {**DOORS, "monitor webhook": (webhook, "monitor.webhook_timeout_s", WebhookFailed)}
    for door, (make, _, error) in doors.items():
        request = make(server, timeout_s=2)
        server.faults, server.dribble_s = ["dribble"], 1.0
        started = time.monotonic()
        try:
            request()
            seconds[door] = "answered (no deadline held)"
        except error:
            seconds[door] = round(time.monotonic() - started, 2)
    return seconds


def huge_reply(server, settings: dict) -> dict:
    server.faults = [{"huge": 50_000_000}]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", HUGE_CLIENT, server.base_url, json.dumps(settings)],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"bench: the 50 MB reply's client failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.splitlines()[-1])


def triad_stage(server, work_dir: Path, questions: int = 8) -> float:
    """The triad judging `questions` questions at once (their 3 independent requests each, then
    each one's verification: two rounds of requests, all in flight), in this process."""
    from test_triad_parallel import ANSWER, HITS, triad

    from ragexp.base.concurrency import map_concurrently
    from ragexp.types import Question

    judge, _ = triad(server, work_dir, max_concurrency=4 * questions)  # a session and cache of its own
    asked = [Question(f"q{n}", f"Which port does server {n} use ({work_dir.name})?", ("7400",)) for n in range(questions)]
    started = time.perf_counter()
    map_concurrently(lambda q: judge.judge(q, HITS, ANSWER), asked, questions, "judging")
    return time.perf_counter() - started


def triad_cli(work_dir: Path) -> dict:
    """The triad's judging stage in `python -m ragexp` (TRIAD_CLI), CLI_RUNS runs one after the
    other against the test server run as a script at 200 ms: each run's `judging:` seconds."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "openai_server.py"), "--port", str(port), "--latency", "0.2"],
                              stdout=subprocess.PIPE, text=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    runs, loads = [], []
    try:
        assert server.stdout is not None and "serving" in server.stdout.readline()  # once it listens
        for i in range(CLI_RUNS):
            loads.append(round(os.getloadavg()[0], 1))
            proc = subprocess.run([sys.executable, "-m", "ragexp", *TRIAD_CLI, f"judge.endpoint.base_url=http://127.0.0.1:{port}/v1",
                                   f"hydra.run.dir=run-{i}"], cwd=work_dir, env=env, capture_output=True, text=True, timeout=600)
            judging = re.search(r"judging: ([0-9.]+)s", proc.stdout + proc.stderr)
            if proc.returncode != 0 or judging is None or "failed (" in proc.stdout:
                raise SystemExit(f"bench: the triad command failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
            runs.append(float(judging.group(1)))
    finally:
        server.terminate()
        server.wait()
    return {"triad_cli_judging_s": statistics.median(runs), "triad_cli_judging_runs_s": runs, "triad_cli_load_1min": loads}


def measure(work_dir: Path, args=None) -> dict:
    from openai_server import OpenAIServer

    figures: dict = {"load_1min": round(os.getloadavg()[0], 1)}
    with OpenAIServer(latency=0.2) as server:
        pair, pairs, stages = round_trips(server), [], []
        for i in range(RUNS):  # alternating, so that a slow moment of the machine falls on both
            pairs.append(pair())
            stages.append(round(triad_stage(server, work_dir / f"triad-{i}"), 3))
    figures["two_round_trips_s"] = round(statistics.median(pairs), 3)
    figures["triad_8_judging_s"] = statistics.median(stages)
    figures["triad_8_judging_runs_s"] = stages
    figures["triad_over_two_round_trips"] = round(figures["triad_8_judging_s"] / figures["two_round_trips_s"], 3)
    figures.update(triad_cli(work_dir))
    figures["triad_cli_over_two_round_trips"] = round(figures["triad_cli_judging_s"] / figures["two_round_trips_s"], 3)
    with OpenAIServer() as server:
        figures["dribble_fails_after_s"] = dribbled(server)
        figures["reply_50mb_default_cap"] = huge_reply(server, {})
        figures["reply_50mb_cap_100mb"] = huge_reply(server, {"max_reply_bytes": 100_000_000})
    page(figures)
    return figures


def page(f: dict) -> None:
    dribble = ", ".join(f"{door} {s} s" if isinstance(s, float) else f"{door}: {s}" for door, s in f["dribble_fails_after_s"].items())
    lines = ["# Deadlines and reply caps", "",
             f"`python bench/run.py deadlines`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, "
             f"1-minute load {f['load_1min']} at the start.", "",
             "| figure | value | goal |", "| --- | --- | --- |",
             f"| two sequential chat requests, 200 ms server (median of {RUNS}) | {f['two_round_trips_s']} s | |",
             f"| the triad judging 8 questions at once, 32 requests in two rounds (median of {RUNS}: {f['triad_8_judging_runs_s']}) | "
             f"{f['triad_8_judging_s']} s = {f['triad_over_two_round_trips']}x the two round trips | <= 1.15x |",
             f"| the same in `python -m ragexp {' '.join(TRIAD_CLI)}`, its `judging:` line (median of {CLI_RUNS}: "
             f"{f['triad_cli_judging_runs_s']}; 1-minute load at each start {f['triad_cli_load_1min']}) | "
             f"{f['triad_cli_judging_s']} s = {f['triad_cli_over_two_round_trips']}x the two round trips | <= 1.15x at load < 2 |",
             f"| a reply sent a byte a second, timeout_s=2, no retry: fails after | {dribble} | < 3 s each |",
             f"| a 50 MB reply, default max_reply_bytes (10 MB): peak RSS of the client process | "
             f"{f['reply_50mb_default_cap']['peak_rss_mb']} MB ({f['reply_50mb_default_cap']['outcome']}) | |",
             f"| the same, max_reply_bytes=100000000 | {f['reply_50mb_cap_100mb']['peak_rss_mb']} MB "
             f"({f['reply_50mb_cap_100mb']['outcome']}) | |", ""]
    (Path(__file__).parent / "results" / "deadlines.md").write_text("\n".join(lines))
