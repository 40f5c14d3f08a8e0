"""Figure group `cheap_judge` (python bench/run.py cheap_judge): how fast the default offline judge
judges, on 100 recorded-outputs rows made from HotpotQA dev500 (its first 5 paragraphs as contexts,
the answer paraphrased: its reference said in a sentence, then the first sentence of a supporting
paragraph reworded, so that no answer is context text verbatim), with a cold stage cache and
embedding store, `tracker=none`: rows per second of the judging stage and of the whole command
(goal: >= 10 rows/s), at the machine's load as it is and with 2 busy processes per core beside it
(threads that spin under contention cost more than the work). RAGEXP_BENCH_BEFORE=CHECKOUT also
measures another checkout of ragexp (e.g. main before a change) at the machine's load, as "before"."""
from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOTPOT = ROOT.parent / "shared" / "data" / "hotpotqa_ircot_dev500" / "dev_subsampled.jsonl"
ROWS = 100
REWORDED = {"is": "was", "was": "is", "are": "were", "were": "are", "the": "that", "a": "one", "and": "as well as",
            "in": "within", "of": "from", "by": "through", "also": "too", "known": "called", "which": "that"}


def reworded(sentence: str) -> str:
    """The sentence without its parentheses, its common words swapped for others (a paraphrase
    no context sentence holds verbatim)."""
    sentence = re.sub(r"\s*\([^)]*\)", "", sentence)
    return re.sub(r"\b\w+\b", lambda m: REWORDED.get(m.group(0), m.group(0)), sentence)


def rows(count: int = ROWS) -> list[dict]:
    out = []
    for line in HOTPOT.read_text().splitlines()[:count]:
        q = json.loads(line)
        contexts = [{"text": c["paragraph_text"], "doc_id": c["title"]} for c in q["contexts"][:5]]
        supporting = [c for c in q["contexts"] if c.get("is_supporting")] or q["contexts"]
        span = q["answers_objects"][0]["spans"][0]
        answer = f"The answer is {span}. " + reworded(supporting[0]["paragraph_text"].split(".  ")[0].rstrip(".") + ".")
        out.append({"id": q["question_id"], "question": q["question_text"], "contexts": contexts, "answer": answer,
                    "reference": [span]})
    return out


def busy() -> None:
    while True:
        pass


def judged(work_dir: Path, data: Path, label: str, code: Path = ROOT) -> dict:
    cache = work_dir / f"cache-{label}"
    shutil.rmtree(cache, ignore_errors=True)  # cold: no judgement, no vector stored
    out = work_dir / f"run-{label}"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "ragexp", "dataset=outputs", f"dataset.path={data}", "tracker=none",
                           f"cache.dir={cache}", f"hydra.run.dir={out}"], cwd=work_dir, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(code)})
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"bench cheap_judge: the run failed:\n{proc.stderr[-3000:]}")
    meta = json.loads((out / "run.json").read_text())
    timings = meta["timings_s"]
    return {"rows_per_s": round(ROWS / wall, 2), "judging_rows_per_s": round(ROWS / timings["judging"], 2),
            "wall_s": round(wall, 1), "judging_s": round(timings["judging"], 1),
            "judging_cpu_s": round(timings.get("judging_cpu", float("nan")), 1),
            "texts_embedded": meta.get("work", {}).get("embedded_texts"), "load_1min": round(os.getloadavg()[0], 1)}


def measure(work_dir: Path, args=None) -> dict:
    if not HOTPOT.exists():
        raise SystemExit(f"bench cheap_judge: {HOTPOT} is missing")
    work_dir.mkdir(parents=True, exist_ok=True)
    data = work_dir / "paraphrased.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    figures: dict = {"rows": ROWS}
    if os.environ.get("RAGEXP_BENCH_BEFORE"):
        figures["before"] = judged(work_dir, data, "before", Path(os.environ["RAGEXP_BENCH_BEFORE"]).resolve())
    figures["as_is"] = judged(work_dir, data, "as-is")
    spinners = [multiprocessing.Process(target=busy, daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
    for spinner in spinners:
        spinner.start()
    try:
        figures["at_load_2x_cores"] = judged(work_dir, data, "loaded")
    finally:
        for spinner in spinners:
            spinner.kill()
    return figures


if __name__ == "__main__":
    import tempfile

    print(json.dumps(measure(Path(tempfile.mkdtemp(prefix="ragexp-cheap-judge-"))), indent=2))
