"""Figure group `cascade` (python bench/run.py cascade): the cascade's estimate of the hallucination
rate with people's labels as the expensive judge, on the human-labelled sets of
docs/how-to/judge-agreement.md that this machine can read (the held-out parts; nothing here is
tuned), and the cheap judge `offline_learned` (its hallucination flag; its probability gives the
draw's uncertainty, as judge=cascade computes it).

For samples of 5%, 10% and 20% and RESAMPLES draws (each with its own seed of the per-question
uniform numbers): how often the 95% CI covers the all-labelled rate (goal >= 93%), the median CI
width against the classical CI of the same labelled questions alone (their mean and t interval:
goal, never wider at 10%; <= 0.7x on the set where the cheap judge agrees best), and the median
effective sample size; each for the draw by uncertainty (judge=cascade's) and a uniform draw. Beside them, the plain baseline of the first-hour issue: the share
of answer words found in the context, its ROC AUC against the cheap judge's."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
SHARES = (0.05, 0.1, 0.2)
RESAMPLES = 1000
SETS = ("lfqa", "qags_xsum", "qags_cnndm", "faithbench")


def word_share(answer: str, passages) -> float:
    words = re.findall(r"\w+", answer.lower())
    context = set(re.findall(r"\w+", " ".join(passages).lower()))
    return sum(w in context for w in words) / len(words) if words else 1.0


def per_set(items, judge) -> dict:
    from judge_agreement import learned_probabilities, roc_auc

    from ragexp.stats.ppi import coordinated_uniform, inclusion_probabilities, ppi_sampled, t_value

    started = time.perf_counter()
    p = np.array(learned_probabilities(judge, items))
    seconds = time.perf_counter() - started
    flag = (p > judge.hallucination_threshold).astype(float)
    people = np.array([0.0 if i.supported else 1.0 for i in items])
    truth = people.mean()
    t = judge.hallucination_threshold
    uncertainty = np.maximum(0.0, 1 - np.abs(p - t) / max(t, 1 - t))
    n = len(items)
    out = {"items": n, "all_labelled_rate": round(float(truth), 4), "cheap_rate": round(float(flag.mean()), 4),
           "cheap_auc": roc_auc(list(p), [bool(v) for v in people]),
           "baseline_word_share_auc": roc_auc([1 - word_share(i.answer, i.passages) for i in items], [bool(v) for v in people]),
           "judge_rows_per_s": round(n / seconds, 1), "samples": {}}
    u = np.array([[coordinated_uniform(i.id, seed) for i in items] for seed in range(RESAMPLES)])
    for share in SHARES:
        for draw, floor in (("by uncertainty", 0.5 * share), ("uniform", share)):  # judge=cascade's default floor; all alike
            pi = inclusion_probabilities(uncertainty, share * n, floor)
            drawn = u < pi
            estimate, half, _ = ppi_sampled(np.broadcast_to(flag, drawn.shape), np.broadcast_to(people, drawn.shape), drawn, pi)
            labels = drawn.sum(axis=1)
            # the classical CI of the same labelled questions alone: their mean, t * sd / sqrt(n)
            means = np.array([people[row].mean() if row.any() else np.nan for row in drawn])
            spread = np.array([people[row].std(ddof=1) if row.sum() > 1 else np.nan for row in drawn])
            classical = t_value(0.95, np.maximum(labels - 1, 1)) * spread / np.sqrt(np.maximum(labels, 1))
            error = half / t_value(0.95, np.maximum(labels - 1, 1))
            out["samples"][f"{share:.0%} {draw}"] = {
                "coverage": round(float(np.mean(np.abs(estimate - truth) <= half)), 4),
                "classical_coverage": round(float(np.nanmean(np.abs(means - truth) <= classical)), 4),
                "median_width": round(float(np.median(2 * half)), 4),
                "median_width_classical": round(float(np.nanmedian(2 * classical)), 4),
                "width_ratio": round(float(np.median(half) / np.nanmedian(classical)), 3),
                "median_labels": int(np.median(labels)),
                "median_effective_sample_size": round(float(np.nanmedian(spread ** 2 / error ** 2)), 1)}
    return out


def measure(work_dir: Path, args=None) -> dict:
    from judge_agreement import learned_judge, load_set, scoring_embedder, sources_dir_of

    sources = sources_dir_of(args)
    judge = learned_judge(scoring_embedder())
    figures: dict = {"load_1min": round(os.getloadavg()[0], 1), "resamples": RESAMPLES, "sets": {}, "missing": []}
    for name in SETS:
        items = load_set(name, sources)
        if not items:
            figures["missing"].append(name)
            continue
        heldout = [i for i in items if i.part == "heldout"]
        figures["sets"][name] = per_set(heldout, judge)
    page(figures)
    return figures


def page(f: dict) -> None:
    lines = ["# Cascade judging: coverage and width with people's labels as the expensive judge", "",
             f"`python bench/run.py cascade`, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, 1-minute load "
             f"{f['load_1min']} at the start; {f['resamples']} draws per sample (bench/cascade.py). The held-out part of "
             "each labelled set; cheap judge offline_learned (its flag); the draw by its uncertainty with "
             "judge=cascade's floor, or uniform; the truth is the rate over all the held-out items' labels. Classical: "
             "the mean of the same drawn labels alone with its t interval (unweighted, so biased where the draw is not "
             "uniform).", "",
             "| set | items | truth / cheap | cheap AUC / word-share AUC | sample, draw | labels (median) | coverage (goal >= 0.93) "
             "| classical coverage | CI width / classical (goal <= 1 at 10%) | effective sample size |", "|" + " --- |" * 10]
    for name, s in f["sets"].items():
        for share, v in s["samples"].items():
            lines.append(f"| {name} | {s['items']} | {s['all_labelled_rate']} / {s['cheap_rate']} | "
                         f"{s['cheap_auc']:.3f} / {s['baseline_word_share_auc']:.3f} | {share} | {v['median_labels']} | "
                         f"{v['coverage']} | {v['classical_coverage']} | {v['median_width']} / "
                         f"{v['median_width_classical']} = {v['width_ratio']}x | {v['median_effective_sample_size']} |")
    if f["missing"]:
        lines += ["", f"Not on this machine (their sources are read from snapshots, `--sources`): {', '.join(f['missing'])}."]
    lines += ["", "The cheap judge's rows per second (5-paragraph rows are the `judge_agreement` group's): "
              + ", ".join(f"{n} {s['judge_rows_per_s']}" for n, s in f["sets"].items()), ""]
    (Path(__file__).parent / "results" / "cascade.md").write_text("\n".join(lines))


if __name__ == "__main__":
    import json

    print(json.dumps(measure(Path("/tmp")), indent=2))
