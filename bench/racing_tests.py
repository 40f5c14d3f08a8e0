"""Could another test than Holm-corrected paired permutation tests race for fewer questions without
dropping good configurations more often? Two candidates, measured on the tuning grids
(bench/racing_tune.py: races replayed on their full grids' tables, never on the bench grid) and on
simulated rounds where the truth is known:

- `maxt`: Romano & Wolf's step-down max-T (2005), a bootstrap of all the round's differences with the
  best at once, which uses their correlation where Holm pays Bonferroni's price;
- `best_of_all`: a test of "this configuration is as good as the best of all", by the largest
  studentised difference by which any other configuration beats it (Hsu's multiple comparisons with
  the best, one-sided at alpha / 2), which does not take the round's best as given. Its null
  distribution comes either from permuting the configurations' scores within each question
  (`best_of_all_permuted`; `best_of_all_centred` permutes the scores less each configuration's mean)
  or from flipping the sign of each question's centred scores, all
  configurations at once (`best_of_all`): the paired permutation test's sign flips, on every pair at
  once, so the comparisons keep their correlation.

    PYTHONPATH=$PWD python bench/racing_tests.py replay TUNE_WORK OUT.jsonl   # TUNE_WORK: racing_tune.py full
    PYTHONPATH=$PWD python bench/racing_tests.py null OUT.jsonl [REPEATS]

Results: bench/results/racing.md, "Other tests".
"""
from __future__ import annotations

import json
import math
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from ragexp.stats.inference import bootstrap_weights, holm, paired_test  # noqa: E402
from ragexp.sweep.racing import decide as racing  # noqa: E402

TESTS = ("holm", "maxt", "best_of_all", "best_of_all_permuted", "best_of_all_centred")
ROUNDS = [0.04, 0.06, 0.09, 0.135, 0.2, 0.3, 0.45, 0.675, 1.0]  # the default


def romano_wolf(observed: np.ndarray, boot: np.ndarray) -> np.ndarray:
    """Step-down max-T adjusted p-values (two-sided): `observed` (m,) differences, `boot` (B, m)
    their bootstrap replicates on the same resampled questions; studentised by the bootstrap sd."""
    sd = boot.std(axis=0, ddof=1)
    sd = np.where(sd > 0, sd, np.inf)
    t, t_star = np.abs(observed) / sd, np.abs(boot - observed) / sd
    order = np.argsort(-t, kind="stable")
    adjusted, running = np.empty(len(observed)), 0.0
    for rank, j in enumerate(order):
        p = (np.sum(t_star[:, order[rank:]].max(axis=1) >= t[j] - 1e-12) + 1) / (len(boot) + 1)
        running = max(running, p)
        adjusted[j] = running
    return adjusted


def studentised(X: np.ndarray) -> np.ndarray:
    """T[..., i, j] = (mean_i - mean_j) / se(X_i - X_j), X (..., questions, configurations)."""
    n = X.shape[-2]
    centred = X - X.mean(-2, keepdims=True)
    cov = np.einsum("...qi,...qj->...ij", centred, centred) / (n - 1)
    var = np.diagonal(cov, axis1=-2, axis2=-1)
    se2 = (var[..., :, None] + var[..., None, :] - 2 * cov) / n
    diff = X.mean(-2)[..., :, None] - X.mean(-2)[..., None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        lead = np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0))  # a pair that differs by a constant
        return np.where(se2 > 1e-15, diff / np.sqrt(np.maximum(se2, 1e-300)), lead)


def behind_the_best(X: np.ndarray) -> np.ndarray:
    """Per configuration j, max over i != j of T[i, j]: how far j trails the best of the others."""
    T = studentised(X)
    k = T.shape[-1]
    T[..., np.arange(k), np.arange(k)] = -np.inf
    return T.max(-2)


def best_of_all(X: np.ndarray, resamples: int, rng: np.random.Generator, block: int = 100,
                centred: bool = False) -> np.ndarray:
    """Two-sided-equivalent p-values (twice the one-sided) of "j is as good as the best of all",
    X (questions, configurations), higher is better. The null distribution permutes each question's
    scores over the configurations (`centred`: each configuration's scores less its mean, so that
    configurations far apart do not widen it); it is the same for every j, so all of them are pooled."""
    n, k = X.shape
    source = X - X.mean(0) if centred else X
    null = []
    for start in range(0, resamples, block):
        size = min(block, resamples - start)
        order = np.argsort(rng.random((size, n, k)), axis=2)
        null.append(behind_the_best(np.take_along_axis(np.broadcast_to(source, (size, n, k)), order, axis=2)).ravel())
    pooled = np.sort(np.concatenate(null))
    above = len(pooled) - np.searchsorted(pooled, behind_the_best(X) - 1e-9, side="left")
    return np.minimum(1.0, 2 * (above + 1) / (len(pooled) + 1))


def best_of_all_flips(X: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """As best_of_all, the null from flipping the sign of each question's centred scores (one
    Rademacher sign per question, every configuration at once), studentised by the observed errors."""
    n, k = X.shape
    centred = X - X.mean(0)
    diff = X.mean(0)[:, None] - X.mean(0)[None, :]
    cov = centred.T @ centred / (n - 1)
    se = np.sqrt(np.maximum((np.diag(cov)[:, None] + np.diag(cov)[None, :] - 2 * cov) / n, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(se > 1e-12, 1.0 / se, 0.0)  # a pair that never differs is never evidence
    behind = np.where(se > 1e-12, diff * scale, np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0)))
    np.fill_diagonal(behind, -np.inf)
    observed = behind.max(0)  # per j: the largest studentised lead of another configuration over it
    above = np.zeros(k)
    for start in range(0, resamples, 500):
        size = min(500, resamples - start)
        means = (rng.choice([-1.0, 1.0], size=(size, n)) @ centred) / n
        t = (means[:, :, None] - means[:, None, :]) * scale
        t[:, np.arange(k), np.arange(k)] = -np.inf
        above += (t.max(1) >= observed - 1e-9).sum(0)
    return np.minimum(1.0, 2 * (above + 1) / (resamples + 1))


ORIGINAL_DECIDE = racing.decide  # replay() puts decide_with(test) in its place, one test after another


def decide_with(test: str):
    """ragexp.sweep.racing.decide with its Holm step replaced by `test` (holm: unchanged)."""
    original = ORIGINAL_DECIDE

    def decide(runs, names, objective, maximize=True, alpha=0.05, keep_top=1, resamples=2000, seed=0, level=0.95):
        decisions = original(runs, names, objective, maximize, alpha, keep_top, resamples, seed, level)
        tested = [d for d in decisions if not math.isnan(d.p_value)]
        if test == "holm" or not tested:
            return decisions
        best = decisions[0].config
        spec = racing.objective_spec(runs[best], objective)
        resamples = racing.enough_resamples(resamples, len(runs), alpha)
        sign = 1.0 if maximize else -1.0
        configs = [best, *(d.config for d in tested)]
        values = {c: racing.question_values(runs[c], spec) for c in configs}
        common = [q for q in values[best] if all(q in values[c] for c in configs)]
        X = sign * np.array([[values[c][q] for c in configs] for q in common])
        rng = np.random.default_rng(seed)
        if test == "best_of_all":
            adjusted = best_of_all_flips(X, resamples, rng)[1:]
        elif test == "best_of_all_centred":
            adjusted = best_of_all(X, resamples, rng, centred=True)[1:]
        elif test == "maxt":
            diffs = X[:, 1:] - X[:, :1]
            boot = bootstrap_weights(rng, resamples, len(X)) @ diffs / len(X)
            adjusted = romano_wolf(diffs.mean(0), boot)
        else:
            adjusted = best_of_all(X, resamples, rng)[1:]  # best_of_all_permuted
        for d, p in zip(tested, adjusted):
            d.p_holm = float(p)
            dropped = p < alpha and sign * d.difference < 0
            d.verdict = (racing.KEPT_TOP if d.rank <= keep_top else racing.DROPPED) if dropped else racing.KEPT
        return decisions

    return decide


def replay(work: Path, out: Path, seeds: range = range(10)) -> None:
    import racing_tune

    with out.open("w") as f:
        for test in os.environ.get("RAGEXP_RACING_TESTS", ",".join(TESTS)).split(","):
            racing.decide = decide_with(test)
            for row in racing_tune.replay_all(work, {"x1.5 | round": {"rounds": ROUNDS, "control": "round"}}, seeds):
                f.write(json.dumps({"test": test, **row}) + "\n")
                f.flush()
    summary(out, ("grid", "judge", "test"), lambda rows: {
        "evaluations seeds 0-4": mean_of(rows, "evaluation_share", range(5)),
        "evaluations seeds 5-9": mean_of(rows, "evaluation_share", range(5, 10)),
        "requests seeds 0-4": mean_of(rows, "judgement_share", range(5)),
        "requests seeds 5-9": mean_of(rows, "judgement_share", range(5, 10)),
        "winner kept": sum(r["winner_kept"] for r in rows), "close dropped": sum(r["ties_dropped"] for r in rows)})


def mean_of(rows: list[dict], key: str, seeds: range) -> str:
    values = [r[key] for r in rows if r["sample_seed"] in seeds]
    return f"{statistics.mean(values):.1%} (max {max(values):.1%})"


def simulated_round(rng: np.random.Generator, n: int, k: int, spread: float, unequal: bool,
                    resamples: int = 1000) -> dict:
    """One round of k configurations on n questions, scored 0-10 as overall_score is (a shared
    question effect, noise, rounding, a 20% chance of 0 for a hallucination). Configuration 0 and
    those drawn at spread 0 are the best; the others trail by up to `spread`. Their noise has sd 1.5,
    or (`unequal`) sd 0.5 for configuration 0 and up to 3 for the others."""
    means = -spread * rng.random(k)
    means[0] = 0.0
    noise = rng.uniform(0.5, 3.0, k) if unequal else np.full(k, 1.5)
    noise[0] = 0.5 if unequal else 1.5
    X = np.clip(np.round(5 + rng.normal(0, 2, (n, 1)) + means + rng.normal(0, 1, (n, k)) * noise), 1, 10)
    X = X * (rng.random((n, k)) > 0.2)
    order = np.argsort(-X.mean(0), kind="stable")
    best, others = order[0], order[1:]
    dropped = {}
    p = [paired_test(X[:, c], X[:, best], resamples=resamples, seed=int(rng.integers(2**31))).p_value for c in others]
    dropped["holm"] = {int(c) for c, q in zip(others, holm(p)) if q < 0.05}
    diffs = X[:, others] - X[:, [best]]
    boot = bootstrap_weights(rng, resamples, n) @ diffs / n
    dropped["maxt"] = {int(c) for c, q in zip(others, romano_wolf(diffs.mean(0), boot)) if q < 0.05}
    dropped["best_of_all"] = {int(c) for c, q in enumerate(best_of_all_flips(X, resamples, rng)) if q < 0.05}
    dropped["best_of_all_permuted"] = {int(c) for c, q in enumerate(best_of_all(X, resamples, rng)) if q < 0.05}
    centred = best_of_all(X, resamples, rng, centred=True)
    dropped["best_of_all_centred"] = {int(c) for c, q in enumerate(centred) if q < 0.05}
    bests = [c for c in range(k) if means[c] == 0.0]
    return {test: {"a_best_dropped": float(np.mean([c in d for c in bests])),
                   "any_best_dropped": any(c in d for c in bests), "drops": len(d)} for test, d in dropped.items()}


def null(out: Path, repeats: int = 300) -> None:
    rng = np.random.default_rng(20021)
    with out.open("w") as f:
        for spread, unequal in ((0.0, False), (1.0, False), (0.0, True)):
            for n in (20, 100):
                for k in (2, 6, 24):
                    rounds = [simulated_round(rng, n, k, spread, unequal) for _ in range(repeats)]
                    for test in rounds[0]:
                        f.write(json.dumps({"spread": spread, "unequal_noise": unequal, "questions": n,
                                            "configurations": k, "test": test,
                                            **{key: float(np.mean([r[test][key] for r in rounds]))
                                               for key in rounds[0][test]}}) + "\n")
                        f.flush()
    summary(out, ("spread", "unequal_noise", "questions", "configurations", "test"), lambda rows: {
        "chance a given best is dropped": f"{rows[0]['a_best_dropped']:.3f}",
        "chance some best is dropped": f"{rows[0]['any_best_dropped']:.3f}", "drops": f"{rows[0]['drops']:.2f}"})


def summary(path: Path, keys: tuple[str, ...], describe) -> None:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        row = json.loads(line)
        groups[tuple(row[k] for k in keys)].append(row)
    for group, rows in groups.items():
        print(" | ".join(map(str, group)), "|", " | ".join(f"{k}: {v}" for k, v in describe(rows).items()))


if __name__ == "__main__":
    if sys.argv[1] == "replay":
        replay(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        null(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 300)
