"""Figure group `own_system` (python bench/run.py own_system): evaluating your own system.

- recorded: `python -m ragexp dataset=outputs` on recorded-outputs rows made from HotpotQA dev500
  (each question, its first 5 paragraphs as contexts with their titles as doc ids, the first
  sentence of its first supporting paragraph as the answer; the reference answer on every other
  row), stage cache off, judged by the offline judge: with the packaged MiniLM (the default) on the
  first 100 rows, and with the model-free `embedder@scoring_embedder=hash` on all 500 (what ragexp
  itself costs per row); rows per second of the whole command and of its judging stage;
- http: `system=http` against a local stdlib http.server that answers at once (0 ms: a fixed answer
  and 3 contexts), 500 questions, stage cache off, at max_concurrency 1 and 8: the answering stage's
  seconds per question (ragexp's side and the service's own handling, both on this machine), and
  the same for `system=python` calling a function that returns the same reply (no HTTP at all)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500" / "dev_subsampled.jsonl"
REPLY = {"answer": "A fixed answer.", "contexts": [{"text": f"Context {i}.", "doc_id": f"d{i}"} for i in range(3)]}


def recorded_rows() -> list[dict]:
    rows = []
    for n, line in enumerate(HOTPOT.read_text().splitlines()):
        q = json.loads(line)
        contexts = [{"text": c["paragraph_text"], "doc_id": c["title"]} for c in q["contexts"][:5]]
        supporting = [c for c in q["contexts"] if c.get("is_supporting")] or q["contexts"]
        row = {"id": q["question_id"], "question": q["question_text"], "contexts": contexts,
               "answer": supporting[0]["paragraph_text"].split(".  ")[0] + ".",
               "golden_docs": [c["title"] for c in q["contexts"] if c.get("is_supporting")]}
        if n % 2 == 0:
            row["reference"] = q["answers_objects"][0]["spans"]
        rows.append(row)
    return rows


def ragexp(args: list[str], cwd: Path) -> tuple[float, dict, dict]:
    """Wall seconds, results.json's aggregates and run.json of one `python -m ragexp` run."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragexp", *args, "tracker=none", "cache.enabled=false"], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench own_system: ragexp {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    [folder] = [p.parent for p in cwd.glob("outputs/*/*/results.json") if p.parent not in SEEN]
    SEEN.add(folder)
    [aggregates] = json.loads((folder / "results.json").read_text()).values()
    return wall, aggregates, json.loads((folder / "run.json").read_text())


SEEN: set[Path] = set()


class Instant(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real service would
    disable_nagle_algorithm = True  # else each reply's body waits ~40 ms for the client's delayed ACK

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps(REPLY).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def instant_reply(question: str, params: dict) -> dict:
    return REPLY


def measure(work_dir: Path, args=None) -> dict:
    rows = recorded_rows()
    data = work_dir / "recorded.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    figures: dict = {"rows": len(rows), "load_1min": round(os.getloadavg()[0], 1)}
    for label, n, scoring in (("minilm", 100, []), ("hash", len(rows), ["embedder@scoring_embedder=hash"])):
        wall, aggregates, meta = ragexp(["dataset=outputs", f"dataset.path={data}", f"dataset.limit={n}", *scoring],
                                        work_dir)
        assert aggregates["failed_questions"] == 0 and aggregates["total_questions"] == n
        figures[f"recorded_{label}_rows"] = n
        figures[f"recorded_{label}_rows_per_s"] = round(n / wall, 2)
        figures[f"recorded_{label}_judging_rows_per_s"] = round(n / meta["timings_s"]["judging"], 2)
        figures[f"recorded_{label}_wall_s"] = round(wall, 2)
        figures[f"load_1min_after_{label}"] = round(os.getloadavg()[0], 1)

    questions = work_dir / "questions.jsonl"
    questions.write_text("".join(json.dumps({"id": r["id"], "question": r["question"]}) + "\n" for r in rows))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Instant)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/answer"
    fast = ["embedder@scoring_embedder=hash", "dataset=outputs", f"dataset.path={questions}"]
    try:
        for concurrency in (1, 8):
            _, aggregates, meta = ragexp(["system=http", f"system.url={url}", f"system.max_concurrency={concurrency}",
                                          *fast], work_dir)
            assert aggregates["failed_questions"] == 0
            figures[f"http_ms_per_question_c{concurrency}"] = round(1000 * meta["timings_s"]["answering"] / len(rows), 3)
            figures[f"http_cpu_ms_per_question_c{concurrency}"] = round(
                1000 * meta["timings_s"]["answering_cpu"] / len(rows), 3)
    finally:
        server.shutdown()
    (work_dir / "instant_system.py").write_text(f"REPLY = {REPLY!r}\n\ndef answer(question, params):\n    return REPLY\n")
    _, aggregates, meta = ragexp(["system=python", "system.function=instant_system:answer", *fast], work_dir)
    figures["python_ms_per_question"] = round(1000 * meta["timings_s"]["answering"] / len(rows), 3)
    figures["load_1min_after"] = round(os.getloadavg()[0], 1)
    return figures


if __name__ == "__main__":
    import tempfile

    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-bench-"))), indent=2))
