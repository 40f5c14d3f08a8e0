"""`python -m ragexp.monitor.synthetic OUT --records N`: synthetic production logs for tests,
the benchmark and trying the monitor, built from the bundled sample's questions and documents.

Records are spread evenly over `--span` from `--start`, in time order. Healthy traffic: latency
log-normal around 800 ms, 1% errors, feedback on 30% of records (85% satisfied), answers taken
from their contexts. From `--degrade-from` (a time, or a fraction of the span such as 0.75) on,
degradation can be injected: `--slower 3` (latency x3), `--errors 0.2` (error rate), `--satisfied
0.4` (share of positive feedback), `--unrelated 0.8` (share of answers about another question,
so unsupported by their contexts). `--malformed K` writes K broken lines among the records.

For an A/B test, `--variants A,B` assigns each record a variant at random (`--split 0.5,0.5`, equal
shares by default) and writes it in the `variant` column; `--degrade-variant B` limits the injected
degradation to that variant (a planted effect; without any degradation the stream is an A/A test)."""
from __future__ import annotations

import argparse
import csv
import json
import time
from datetime import datetime, UTC
from pathlib import Path

import numpy as np

from ragexp.monitor.windows import window_seconds
from ragexp.config.build import from_yaml

ERROR_KINDS = ("llm_timeout", "retrieval_error", "rate_limited")
BATCH = 50_000


def templates() -> list[dict]:
    """(query, contexts, answer, unrelated answer) from the bundled sample: the answer is the
    expected answer, which the first context states; the unrelated answer is another question's."""
    dataset = from_yaml("dataset/sample").load()
    docs = {d.doc_id: d.text for d in dataset.documents}
    questions = dataset.questions
    made = []
    for i, q in enumerate(questions):
        golden = [d for d in q.golden if d in docs] or [next(iter(docs))]
        contexts = [{"doc_id": golden[0], "text": f"{q.expected} {first_paragraph(docs[golden[0]])}"}]
        if len(golden) > 1:
            contexts.append({"doc_id": golden[1], "text": first_paragraph(docs[golden[1]])})
        made.append({"query": q.text, "contexts": contexts, "answer": q.expected,
                     "unrelated": questions[(i + len(questions) // 2) % len(questions)].expected})
    return made


def first_paragraph(text: str, limit: int = 240) -> str:
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip() and not p.lstrip().startswith("#")]
    return (paragraphs[0] if paragraphs else text.strip())[:limit].replace("\n", " ")


def degrade_start(value: str | None, start: float, span: float) -> float:
    if value is None:
        return float("inf")
    try:
        share = float(value)
    except ValueError:
        return datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp()
    return start + share * span


def generate(out: Path, records: int, start: str = "2026-11-01T00:00:00", span: str = "7d", seed: int = 0,
             degrade_from: str | None = None, slower: float = 1.0, errors: float | None = None,
             satisfied: float | None = None, unrelated: float = 0.0, malformed: int = 0,
             model: str = "gpt-4o-mini", variants: tuple[str, ...] = (), split: tuple[float, ...] | None = None,
             degrade_variant: str | None = None) -> Path:
    rng = np.random.default_rng(seed)
    begin = datetime.fromisoformat(start).replace(tzinfo=UTC).timestamp()
    length = window_seconds(span)
    degraded_from = degrade_start(degrade_from, begin, length)
    pool = templates()
    contents = [[(t["query"], t["contexts"], t[kind]) for kind in ("answer", "unrelated")] for t in pool]
    bad = set(rng.choice(records, size=min(malformed, records), replace=False).tolist()) if malformed else set()
    csv_out = out.suffix.lower() == ".csv"
    if degrade_variant is not None and degrade_variant not in variants:
        raise ValueError(f"--degrade-variant {degrade_variant!r} is not one of --variants {','.join(variants)}")
    shares = np.asarray(split if split else [1.0] * len(variants), dtype=np.float64)
    if variants and (len(shares) != len(variants) or (shares <= 0).any()):
        raise ValueError(f"--split needs {len(variants)} shares > 0, one per variant")
    shares = shares / shares.sum() if variants else shares
    fragments = [[json.dumps({"query": q, "contexts": c, "answer": a})[1:-1] for q, c, a in pair] for pair in contents]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle) if csv_out else None
        if writer:
            writer.writerow(["timestamp", "query", "contexts", "answer", "latency_ms", "tokens_in", "tokens_out",
                             "model", "error", "feedback", *(["variant"] if variants else [])])
        for first in range(0, records, BATCH):
            n = min(BATCH, records - first)
            index = np.arange(first, first + n)
            times = begin + (index + rng.random(n)) * (length / records)
            late = times >= degraded_from
            arm = rng.choice(len(variants), size=n, p=shares) if variants else None
            if degrade_variant is not None:
                late &= arm == variants.index(degrade_variant)
            latency = rng.lognormal(np.log(800), 0.45, n) * np.where(late, slower, 1.0)
            error_p = np.where(late, errors if errors is not None else 0.01, 0.01)
            failed = rng.random(n) < error_p
            kinds = rng.integers(0, len(ERROR_KINDS), n)
            has_feedback = rng.random(n) < 0.3
            happy = rng.random(n) < np.where(late, satisfied if satisfied is not None else 0.85, 0.85)
            off_topic = late & (rng.random(n) < unrelated)
            which = rng.integers(0, len(pool), n)
            tokens_in = rng.integers(600, 1400, n)
            tokens_out = rng.integers(40, 220, n)
            for j in range(n):
                if first + j in bad:
                    handle.write("{this line is not JSON\n" if not writer else "broken,line\n")
                    continue
                stamp = datetime.fromtimestamp(float(times[j]), UTC).isoformat(timespec="milliseconds")
                stamp = stamp.replace("+00:00", "Z")
                error = ERROR_KINDS[kinds[j]] if failed[j] else None
                fb = (1 if happy[j] else 0) if has_feedback[j] and not failed[j] else None
                kind = int(off_topic[j])
                served = [] if arm is None else [variants[arm[j]]]
                if writer:
                    q, c, a = contents[which[j]][kind]
                    writer.writerow([stamp, q, json.dumps(c), "" if error else a, f"{latency[j]:.1f}", int(tokens_in[j]),
                                     0 if error else int(tokens_out[j]), model, error or "", "" if fb is None else fb,
                                     *served])
                    continue
                body = fragments[which[j]][kind] if not error else '"query": ' + json.dumps(pool[which[j]]["query"])
                handle.write(f'{{"timestamp": "{stamp}", "latency_ms": {latency[j]:.1f}, "tokens_in": {tokens_in[j]}, '
                             f'"tokens_out": {0 if error else tokens_out[j]}, "model": "{model}", '
                             f'"error": {json.dumps(error)}, "feedback": {json.dumps(fb)}, '
                             + (f'"variant": {json.dumps(served[0])}, ' if served else "") + f'{body}}}\n')
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragexp.monitor.synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="file to write (.jsonl, or .csv)")
    p.add_argument("--records", type=int, default=10_000)
    p.add_argument("--start", default="2026-11-01T00:00:00", help="UTC time of the first record")
    p.add_argument("--span", default="7d", help="time the records cover (1d, 12h, ...)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--degrade-from", help="from this UTC time (or this fraction of the span) on, inject degradation")
    p.add_argument("--slower", type=float, default=1.0, help="latency factor after --degrade-from")
    p.add_argument("--errors", type=float, help="error rate after --degrade-from (default 0.01, as before)")
    p.add_argument("--satisfied", type=float, help="share of positive feedback after --degrade-from (default 0.85)")
    p.add_argument("--unrelated", type=float, default=0.0, help="share of answers unrelated to their contexts after --degrade-from")
    p.add_argument("--malformed", type=int, default=0, help="number of broken lines to write among the records")
    p.add_argument("--variants", default="", help="A/B variants assigned at random, e.g. A,B (column `variant`)")
    p.add_argument("--split", default="", help="their shares, e.g. 0.5,0.5 (default: equal)")
    p.add_argument("--degrade-variant", help="inject the degradation into this variant only (a planted A/B effect)")
    args = p.parse_args(argv)
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    try:
        split = tuple(float(x) for x in args.split.split(",")) if args.split else None
    except ValueError:
        p.error(f"--split {args.split!r}: shares are numbers, e.g. 0.5,0.5")
    started = time.perf_counter()
    try:
        generate(args.out, args.records, args.start, args.span, args.seed, args.degrade_from, args.slower, args.errors,
                 args.satisfied, args.unrelated, args.malformed, variants=variants, split=split,
                 degrade_variant=args.degrade_variant)
    except ValueError as err:
        p.error(str(err))
    print(f"wrote {args.records} records to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
