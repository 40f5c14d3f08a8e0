"""The learned offline verifier: what an answer's claims find in the context, as numbers
(`answer_features`), and a logistic model over them read from plain JSON (`Verifier`), giving the
probability that people would not judge the answer fully supported. Nothing here runs code read
from disk: the model file holds the feature names, their scaling, the weights and the threshold.

The features are computed from the answer, the passages and MiniLM's sentence vectors, as the
offline judge computes its evidence (ragexp.judges.offline); the shipped weights were fitted on the
tuning parts of the labelled sets of docs/how-to/judge-agreement.md (`python bench/judge_agreement.py learn`).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.base.text import words

SHIPPED = Path(__file__).resolve().parent / "verifier" / "offline_verifier.json"
_TOKEN = re.compile(r"\w+", re.UNICODE)

# per claim: what the context holds for it (each in [0, 1] but `cosine_*` in [-1, 1] and `claim_words`)
CLAIM_SIGNALS = ("verbatim", "cosine_stating", "cosine_any", "overlap_stating", "word_cover", "bigram_cover",
                 "anchor_cover", "anchors_in_one", "claim_words")


# the answer features where a higher value means more support: the model's weight on each is at most 0
SUPPORT_FEATURES = frozenset(f"{agg}_{s}" for s in CLAIM_SIGNALS if s != "claim_words" for agg in ("min", "mean"))


def bigrams(text: str) -> set[tuple[str, str]]:
    tokens = _TOKEN.findall(text.lower())
    return set(zip(tokens, tokens[1:]))


@dataclass(frozen=True)
class ContextIndex:
    """The context's words, word pairs and numbers-and-names, computed once per judged answer."""

    words: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    tokens: frozenset[str]

    @classmethod
    def of(cls, passages: Sequence[str]) -> ContextIndex:
        from ragexp.judges.offline import numbers

        text = "\n".join(passages)
        tokens = {w.lower() for w in re.findall(r"[\w'-]+", text)} | numbers(text)
        return cls(frozenset(words(text)), frozenset(bigrams(text)), frozenset(tokens))


def claim_signals(sentence: str, vector: np.ndarray, evidence, c: np.ndarray, index: ContextIndex) -> dict[str, float]:
    """One claim's signals (see CLAIM_SIGNALS): `evidence` is the offline judge's ClaimEvidence for it
    (verbatim, best cosine with a sentence of a passage stating its numbers and names, content-word
    overlap with such a passage); the rest look at the whole context: best cosine with any sentence,
    shares of its content words, word pairs and numbers-and-names found anywhere in it. A verbatim
    claim (text of one passage that states its numbers) has the strongest support by definition:
    every signal but its length is 1, whatever the name heuristics of `anchors` make of it. A short
    answer read with its question (ragexp.judges.short_answers) has every signal of a verbatim claim
    when a context sentence about the question states it, and none (0) when none does."""
    from ragexp.judges.offline import anchors

    claim_words = set(words(sentence))
    if evidence.verbatim or evidence.in_question is not None:
        value = 1.0 if evidence.verbatim or evidence.in_question else 0.0
        return {**{s: value for s in CLAIM_SIGNALS}, "claim_words": float(len(claim_words))}
    pairs = bigrams(sentence)
    stated = anchors(sentence)
    return {
        "verbatim": float(evidence.verbatim),
        "cosine_stating": max(evidence.cosine, 0.0),
        "cosine_any": float(np.max(c @ vector)) if len(c) else 0.0,
        "overlap_stating": float(evidence.overlap),
        "word_cover": len(claim_words & index.words) / len(claim_words) if claim_words else 1.0,
        "bigram_cover": len(pairs & index.bigrams) / len(pairs) if pairs else 1.0,
        "anchor_cover": len(stated & index.tokens) / len(stated) if stated else 1.0,
        "anchors_in_one": float(evidence.cosine > -1.0),
        "claim_words": float(len(claim_words)),
    }


def answer_features(claims: Sequence[dict[str, float]], answer: str) -> dict[str, float]:
    """The answer's features: each claim signal's lowest and mean value over its claims (an answer
    without a claim counts as one fully supported claim), how many claims and words it has."""
    rows = list(claims) or [{**{s: 1.0 for s in CLAIM_SIGNALS}, "cosine_any": 1.0, "claim_words": 0.0}]
    features: dict[str, float] = {}
    for signal in CLAIM_SIGNALS:
        values = [row[signal] for row in rows]
        if signal == "claim_words":
            features["mean_claim_words"] = math.log1p(float(np.mean(values)))
            continue
        features[f"min_{signal}"] = float(min(values))
        features[f"mean_{signal}"] = float(np.mean(values))
    features["claims"] = math.log1p(len(claims))
    features["answer_words"] = math.log1p(len(_TOKEN.findall(answer)))
    return features


@dataclass(frozen=True)
class Verifier:
    """A logistic model over `answer_features`: P(not supported) = sigmoid(bias + weights .
    (x - mean) / scale). `threshold` is the probability above which an answer is flagged."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    threshold: float
    about: dict

    def probability(self, features: dict[str, float]) -> float:
        x = np.array([features[name] for name in self.features], dtype=float)
        z = self.bias + float(self.weights @ ((x - self.mean) / self.scale))
        return float(1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0))))

    def to_json(self) -> dict:
        return {"kind": "logistic", "features": list(self.features), "mean": self.mean.round(6).tolist(),
                "scale": self.scale.round(6).tolist(), "weights": self.weights.round(6).tolist(),
                "bias": round(self.bias, 6), "threshold": round(self.threshold, 4), "about": self.about}

    @classmethod
    def load(cls, path: str | Path, setting: str = "judge.weights") -> Verifier:
        """The model in `path` (plain JSON), checked: a RagexpError naming the setting and the file
        when it is missing, not JSON, or not a logistic model over the features computed here."""
        where = f"{setting}: {path}"
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise RagexpError(f"{where} does not exist") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RagexpError(f"{where} cannot be read as JSON ({err})") from None
        if not isinstance(data, dict) or data.get("kind") != "logistic":
            raise RagexpError(f'{where} is not a verifier model (expected a JSON object with "kind": "logistic")')
        try:
            names = tuple(str(n) for n in data["features"])
            arrays = [np.asarray(data[k], dtype=float) for k in ("mean", "scale", "weights")]
            bias, threshold = float(data["bias"]), float(data["threshold"])
        except (KeyError, TypeError, ValueError) as err:
            raise RagexpError(f"{where}: missing or non-numeric field ({err})") from None
        known = set(answer_features([], ""))
        unknown = [n for n in names if n not in known]
        if unknown:
            raise RagexpError(f"{where}: features this version does not compute: {', '.join(unknown)}")
        if any(a.shape != (len(names),) for a in arrays) or not all(np.isfinite(a).all() for a in arrays):
            raise RagexpError(f"{where}: mean, scale and weights must be {len(names)} finite numbers each")
        if (arrays[1] <= 0).any() or not 0.0 <= threshold <= 1.0 or not math.isfinite(bias):
            raise RagexpError(f"{where}: scales must be positive and the threshold between 0 and 1")
        return cls(names, arrays[0], arrays[1], arrays[2], bias, threshold, dict(data.get("about") or {}))
