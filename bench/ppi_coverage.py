"""bench group `ppi`: how often the human-corrected (prediction-powered) 95% CI of
ragexp.stats.ppi covers the truth, against the paper's exact variance for the same labels, the
cascade's tuned form and the judge-only CI, on synthetic data with a known truth and a biased judge
(the scenarios of tests/test_ppi.py, over more seeds), and how long the vectorised estimate takes."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np


def one_to_ten(rng, n):
    people = rng.integers(1, 11, size=n).astype(float)  # mean 5.5
    return people, np.clip(np.round(people + 1.5 + rng.normal(0, 1.2, size=n)), 1, 10)


def hallucination(rng, n):
    people = (rng.random(n) < 0.2).astype(float)  # rate 0.2; the judge flags 90% of them and 30% of the rest
    return people, np.where(people == 1, rng.random(n) < 0.9, rng.random(n) < 0.3).astype(float)


SCENARIOS = {"one_to_ten (N=500, n=60, truth 5.5)": (one_to_ten, 5.5, 500, 60),
             "hallucination (N=400, n=80, truth 0.2)": (hallucination, 0.2, 400, 80),
             "hallucination (N=400, n=20, truth 0.2)": (hallucination, 0.2, 400, 20),
             "hallucination (N=200, n=10, truth 0.2)": (hallucination, 0.2, 200, 10)}


def textbook_ppi(judge_all, judge_labelled, human_labelled):
    """The paper's estimate and its exact variance for a uniform sample of n of the N (the reference
    ragexp's estimate is checked against): (corrected mean, half width of its 95% CI)."""
    from ragexp.stats.ppi import t_value

    big_n, n = judge_all.shape[-1], judge_labelled.shape[-1]
    corrected = judge_all.mean(axis=-1) - (judge_labelled - human_labelled).mean(axis=-1)
    variance = ((big_n - n) / big_n**2 * judge_all.var(axis=-1, ddof=1)
                + (human_labelled - (1 - n / big_n) * judge_labelled).var(axis=-1, ddof=1) / n)
    return corrected, t_value(0.95, n - 1) * np.sqrt(variance)


def measure(work_dir: Path | None = None, args=None, seeds: int = 2000) -> dict:
    from ragexp.stats.ppi import judge_only, ppi_sampled, t_value

    t_value(0.95, 10)  # scipy imported before anything is timed
    figures = {}
    for name, (draw, truth, questions, labelled) in SCENARIOS.items():
        people, judge = map(np.array, zip(*(draw(np.random.default_rng(s), questions) for s in range(seeds))))
        drawn = np.zeros(judge.shape, dtype=bool)
        drawn[:, :labelled] = True
        labels = np.where(drawn, people, np.nan)
        started = time.perf_counter()
        corrected, half, _ = ppi_sampled(judge, labels, drawn, labelled / questions, tune=False)  # ragexp's estimate
        seconds = time.perf_counter() - started
        textbook, textbook_half = textbook_ppi(judge, judge[:, :labelled], people[:, :labelled])
        tuned, tuned_half, _ = ppi_sampled(judge, labels, drawn, labelled / questions, tune=True)
        alone, alone_half = judge_only(judge)
        figures[name] = {"seeds": seeds, "ppi_coverage": coverage(corrected, half, truth),
                         "ppi_mean_width": round(float(np.mean(2 * half)), 4),
                         "textbook_coverage": coverage(textbook, textbook_half, truth),
                         "textbook_mean_width": round(float(np.mean(2 * textbook_half)), 4),
                         "tuned_coverage": coverage(tuned, tuned_half, truth),
                         "tuned_mean_width": round(float(np.mean(2 * tuned_half)), 4),
                         "judge_only_coverage": coverage(alone, alone_half, truth),
                         "judge_only_mean": round(float(np.mean(alone)), 4),
                         "ms_for_all_seeds": round(seconds * 1000, 2)}
    return figures


def coverage(estimate, half, truth: float) -> float:
    return round(float(np.mean(np.abs(estimate - truth) <= half)), 4)


if __name__ == "__main__":
    import json

    print(json.dumps(measure(), indent=2))
