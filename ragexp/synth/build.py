"""The generation loop: per question type, draw sources (stratified), make candidates, apply the
quality rules, dedupe, ask for the grounding verdict, and go round again for what is still missing,
until every type has its quota, its sources or attempts run out, or the budget is spent."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from ragexp.base.concurrency import map_concurrently
from ragexp.errors import BudgetExhausted, QuestionFailed, RagexpError
from ragexp.synth import TYPES
from ragexp.synth.candidates import Candidate, NoCandidate, Rejection, Source
from ragexp.synth.quality import QualityRules
from ragexp.synth.sources import SourcePlan


@dataclass
class SynthResult:
    kept: list[Candidate] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    quotas: dict[str, int] = field(default_factory=dict)
    short: dict[str, str] = field(default_factory=dict)  # type -> why it has fewer than its quota
    skipped_sources: int = 0  # sources not tried: their document already had its share
    unmatched_sources: int = 0  # sources the cloze generator found no template for (not candidates)
    stopped: str = ""  # why generation stopped early (the budget), else ""

    def kept_by_type(self) -> Counter:
        return Counter(c.source.type for c in self.kept)

    def rejected_by_reason(self) -> Counter:
        return Counter(r.reason for r in self.rejections)


def quotas(size: int, mix: Mapping[str, float]) -> dict[str, int]:
    """`size` split over the types in proportion to `mix` (largest remainders, ties in TYPES order)."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise RagexpError(f"synth.size must be a positive integer, got {size!r}")
    unknown = set(mix) - set(TYPES)
    if unknown:
        raise RagexpError(f"synth.mix: unknown question type {', '.join(sorted(unknown))}; the types are {', '.join(TYPES)}")
    shares = {t: mix.get(t, 0) or 0 for t in TYPES}
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in shares.values()) or not sum(shares.values()):
        raise RagexpError(f"synth.mix: shares must be numbers >= 0, not all 0, got {dict(mix)}")
    total = sum(shares.values())
    exact = {t: size * v / total for t, v in shares.items()}
    counts = {t: math.floor(x) for t, x in exact.items()}
    for t in sorted(TYPES, key=lambda t: (-(exact[t] - counts[t]), TYPES.index(t)))[: size - sum(counts.values())]:
        counts[t] += 1
    return {t: n for t, n in counts.items() if n}


def make_one(generator, source: Source, seed: int) -> Candidate | Rejection:
    try:
        return generator.make(source, seed)
    except NoCandidate as err:
        return Rejection(err.reason, source, err.detail)
    except BudgetExhausted as err:
        return Rejection("budget", source, str(err))
    except QuestionFailed as err:
        reason = "unparsable" if "unreadable reply" in str(err) else "request_failed"
        return Rejection(reason, source, str(err))


def verified(generator, candidate: Candidate) -> Rejection | None:
    try:
        grounded, reason = generator.verify(candidate)
    except BudgetExhausted as err:
        return Rejection("budget", candidate.source, str(err), candidate)
    except QuestionFailed as err:
        reason = "unparsable" if "unreadable reply" in str(err) else "request_failed"
        return Rejection(reason, candidate.source, f"grounding verdict: {err}", candidate)
    return None if grounded else Rejection("ungrounded", candidate.source, reason or "the verdict says ungrounded", candidate)


def generate(generator, rules: QualityRules, plan: SourcePlan, scoring_embedder, size: int, mix: Mapping[str, float],
             seed: int = 0, max_attempts: int = 3, max_per_document: int | None = None) -> SynthResult:
    """Up to `size` questions in the proportions of `mix`; each type tries at most `max_attempts`
    sources per question of its quota; no document is the source of more than `max_per_document`
    kept questions (default: its share, ceil(size / documents))."""
    result = SynthResult(quotas=quotas(size, mix))
    unsupported = [t for t in result.quotas if t not in getattr(generator, "types", TYPES)]
    if unsupported:
        raise RagexpError(f"synth.mix: the generator {generator.name!r} makes no {', '.join(unsupported)} questions; "
                          f"set synth.mix.{unsupported[0]}=0")
    documents = len({c.doc_id for c in plan.chunks})
    cap = max_per_document or math.ceil(size / max(documents, 1))
    per_doc: Counter = Counter()
    attempts: Counter = Counter()
    kept_by_type: Counter = Counter()
    deferred: dict[str, list[Source]] = {}  # per type, sources put off to the next round
    while not result.stopped:
        batch, pending = [], Counter[str]()  # pending: this round's sources per document
        for type_, quota in result.quotas.items():
            draws = min(quota - kept_by_type[type_], max_attempts * quota - attempts[type_])
            if draws <= 0:
                deferred[type_] = []
                continue
            waiting, deferred[type_] = deferred.get(type_, []), []
            while draws > 0 and type_ not in result.short:
                source = waiting.pop(0) if waiting else plan.next(type_)
                if source is None:
                    if not deferred[type_]:
                        result.short[type_] = "every source was tried"
                    break
                if any(per_doc[d] >= cap for d in source.doc_ids):
                    result.skipped_sources += 1
                elif any(per_doc[d] + pending[d] >= cap for d in source.doc_ids):
                    deferred[type_].append(source)  # its document may have room once this round is judged
                else:
                    batch.append(source)
                    pending.update(source.doc_ids)
                    attempts[type_] += 1
                    draws -= 1
            deferred[type_][:0] = waiting  # not reached this round: first in the next
        if not batch and not any(deferred.values()):
            break
        made = map_concurrently(lambda s: make_one(generator, s, seed), batch, getattr(generator, "concurrency", 1),
                                desc="generating")
        candidates = []
        for item in made:
            if isinstance(item, Rejection) and item.reason == "no_template_match":  # nothing made: not an attempt
                result.unmatched_sources += 1
                attempts[item.source.type] -= 1
                continue
            if isinstance(item, Rejection):
                result.rejections.append(item)
            elif (problem := rules.check(item)) is None:
                candidates.append(item)
            else:
                result.rejections.append(problem)
        fresh, duplicates = rules.dedupe(candidates, [k.question for k in result.kept], scoring_embedder)
        result.rejections += duplicates
        if generator.verifies:
            verdicts = map_concurrently(lambda c: verified(generator, c), fresh, generator.concurrency, desc="verifying")
        else:
            verdicts = [None] * len(fresh)
        for candidate, problem in zip(fresh, verdicts):
            if problem is not None:
                result.rejections.append(problem)
                continue
            result.kept.append(candidate)
            kept_by_type[candidate.source.type] += 1
            per_doc.update(candidate.source.doc_ids)
        budget = next((r for r in result.rejections if r.reason == "budget"), None)
        if budget is not None:
            result.stopped = budget.detail
    for type_, quota in result.quotas.items():
        if kept_by_type[type_] < quota and type_ not in result.short:
            result.short[type_] = result.stopped or f"{max_attempts} attempts per question used (synth.max_attempts)"
    result.kept.sort(key=lambda c: TYPES.index(c.source.type))
    return result
