"""bench group `ppi`: how often the human-corrected (prediction-powered) 95% CI of
ragexp.stats.ppi covers the truth, against the judge-only CI, on synthetic data with a known
truth and a biased judge (the scenarios of tests/test_ppi.py, over more seeds), and how long the
vectorised estimate takes."""
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


def measure(work_dir: Path | None = None, args=None, seeds: int = 2000) -> dict:
    from ragexp.stats.ppi import judge_only, ppi, ppi_sampled, t_value

    t_value(0.95, 10)  # scipy imported before anything is timed
    figures = {}
    for name, (draw, truth, questions, labelled) in SCENARIOS.items():
        people, judge = map(np.array, zip(*(draw(np.random.default_rng(s), questions) for s in range(seeds))))
        started = time.perf_counter()
        corrected, half = ppi(judge, judge[:, :labelled], people[:, :labelled])
        seconds = time.perf_counter() - started
        alone, alone_half = judge_only(judge)
        figures[name] = {"seeds": seeds, "ppi_coverage": round(float(np.mean(np.abs(corrected - truth) <= half)), 4),
                         "ppi_mean_width": round(float(np.mean(2 * half)), 4),
                         **cascade_form(judge, people, labelled, truth, ppi_sampled),
                         "judge_only_coverage": round(float(np.mean(np.abs(alone - truth) <= alone_half)), 4),
                         "judge_only_mean": round(float(np.mean(alone)), 4),
                         "ms_for_all_seeds": round(seconds * 1000, 2)}
    return figures


def cascade_form(judge, people, labelled: int, truth: float, ppi_sampled) -> dict:
    """The same labels through the cascade's form of the estimate (each question's chance n/N, its
    CI that of independent draws), plain and tuned: why people's labels keep the fixed-size CI."""
    drawn = np.zeros(judge.shape, dtype=bool)
    drawn[:, :labelled] = True
    labels = np.where(drawn, people, np.nan)
    figures = {}
    for form, tune in (("cascade_plain", False), ("cascade_tuned", True)):
        estimate, half, _ = ppi_sampled(judge, labels, drawn, labelled / judge.shape[1], tune=tune)
        figures[f"{form}_coverage"] = round(float(np.mean(np.abs(estimate - truth) <= half)), 4)
        figures[f"{form}_mean_width"] = round(float(np.mean(2 * half)), 4)
    return figures


if __name__ == "__main__":
    import json

    print(json.dumps(measure(), indent=2))
