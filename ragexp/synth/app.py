"""The job behind `python -m ragexp.synth`: load and chunk the corpus, generate, write the
dataset folder, print the counts, log the MLflow run."""
from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragexp.base.redact import written_config
from ragexp.errors import RagexpError
from ragexp.synth import TYPES
from ragexp.datasets import corpus_fingerprint, fingerprint
from ragexp.synth.tracking import keeps_datasets, log_synth, to_mlflow_dataset
from ragexp.config.validation import validate
from ragexp.llm.estimate import RoleEstimate

ROLE = "synth.generator"  # the LLM role: error messages name synth.generator.endpoint.*


def llm_stats(session) -> dict[str, float]:
    """Tokens, cost and request counts of the synth generator (nothing for the cloze generator)."""
    if not session.components:
        return {}
    usage = session.usage
    stats = {"input_tokens": usage.tokens[ROLE, "input"], "output_tokens": usage.tokens[ROLE, "output"],
             "cost_usd": round(usage.cost.get(ROLE, 0.0), 8)}
    stats.update({f"llm_{n}": usage.counts[n] for n in ("requests", "retries", "failures", "cache_hits")})
    stats.update({n: usage.counts[ROLE, n] for n in ("reasks", "unreadable_replies")})
    return stats


def counts(result, stats: dict, seconds: float) -> dict[str, float]:
    """The run's metrics: kept and asked by type, rejected by reason, LLM use, wall time."""
    kept, rejected = result.kept_by_type(), result.rejected_by_reason()
    metrics = {"kept": len(result.kept), "rejected": len(result.rejections), "size": sum(result.quotas.values()),
               "skipped_sources": result.skipped_sources, "unmatched_sources": result.unmatched_sources,
               "synth_time_s": round(seconds, 2)}
    for type_ in TYPES:
        if type_ in result.quotas:
            metrics[f"asked_{type_}"] = result.quotas[type_]
            metrics[f"kept_{type_}"] = kept[type_]
    metrics.update({f"rejected_{reason}": n for reason, n in sorted(rejected.items())})
    metrics.update(stats)
    return metrics


def summary(result, metrics: dict, folder: Path, generator: str) -> str:
    lines = [f"ragexp synth ({generator}): kept {len(result.kept)} of {metrics['size']} asked, "
             f"{len(result.rejections)} candidates rejected, {metrics['synth_time_s']:.1f}s"]
    kept = result.kept_by_type()
    for type_, quota in result.quotas.items():
        why = f"  (short: {result.short[type_]})" if type_ in result.short and kept[type_] < quota else ""
        lines.append(f"  kept {type_:<16} {kept[type_]:>4} / {quota}{why}")
    for reason, n in sorted(result.rejected_by_reason().items(), key=lambda item: -item[1]):
        lines.append(f"  rejected {reason:<16} {n:>4}")
    if result.unmatched_sources:
        lines.append(f"  {result.unmatched_sources} chunks (or pairs) had no sentence that fits a template: no candidate")
    if result.skipped_sources:
        lines.append(f"  {result.skipped_sources} sources not tried: their document already had its share")
    if "llm_requests" in metrics:
        per = metrics["llm_requests"] / max(len(result.kept), 1)
        lines.append(f"  LLM: {metrics['llm_requests']:.0f} requests ({per:.2f} per kept question), "
                     f"{metrics['input_tokens']:.0f} input + {metrics['output_tokens']:.0f} output tokens, "
                     f"${metrics['cost_usd']:.4f}, {metrics['llm_cache_hits']:.0f} from the cache")
    if result.stopped:
        lines.append(f"  stopped early: {result.stopped}")
    lines.append(f"dataset: {folder} (rejections.jsonl lists every rejected candidate)")
    lines.append(f"evaluate it: python -m ragexp dataset=synthetic dataset.path={folder}")
    return "\n".join(lines)


def execute(cfg: DictConfig) -> None:
    from ragexp.run.app import run_where_launched
    from ragexp.store.cache import key_of
    from ragexp.components.embedders import EmbeddingCache
    from ragexp.config.build import build, settings
    from ragexp.synth.build import generate, quotas
    from ragexp.synth.output import load_written, write_dataset
    from ragexp.synth.sources import SourcePlan

    started = time.time()
    synth = cfg.synth
    try:
        run_where_launched()
        validate(cfg)  # every setting (synth.*: ragexp.synth.settings) and component, all problems at once
        rules = build(synth.quality)
        mix = OmegaConf.to_container(synth.mix, resolve=True)
        asked = quotas(synth.size, mix)
        tracker, session, cache = build(cfg.tracker).in_experiment(synth.experiment), build(cfg.llm), build(cfg.cache)
        if synth.get("mlflow_dataset"):
            keeps_datasets(tracker)
        with EmbeddingCache.beside(cache).building():  # every embedder built here shares one vector cache
            loader, chunker, generator = build(cfg.dataset), build(cfg.chunker), build(synth.generator)
            embedder = build(cfg.embedder) if "multi_hop" in asked else None
            scoring_embedder = build(cfg.scoring_embedder)
        try:
            session.connect(**{ROLE: generator})
            dataset = loader.load()
            chunks = cache.cached("chunks", key_of("chunks", corpus_fingerprint(dataset.documents), settings(cfg.chunker)),
                                  lambda: chunker.chunk(dataset.documents))
            if not chunks:
                raise RagexpError(f"dataset: no text to make questions from in {dataset.name} (check dataset.path)")
            plan = SourcePlan(chunks, dataset.documents, synth.seed, embedder, synth.neighbours,
                              getattr(generator, "usable", None))
            if session.dry_run:
                print(dry_run(session, generator, plan, asked))
                return
            result = generate(generator, rules, plan, scoring_embedder, synth.size, mix, synth.seed,
                              synth.max_attempts, synth.max_per_document)
            stats = llm_stats(session)
        finally:
            session.close()
        metrics = counts(result, stats, time.time() - started)
        config = written_config(cfg)
        folder = Path(synth.out).resolve()
        reasons = Counter(r.reason for r in result.rejections)
        write_dataset(folder, result, dataset.documents,
                      {"generator": generator.name, "corpus": dataset.name, "documents": len(dataset.documents),
                       "chunks": len(chunks), "metrics": metrics, "rejected_by_reason": dict(reasons),
                       "short": result.short, "stopped": result.stopped, "config": config})
        tag = fingerprint(load_written(folder))
        print(summary(result, metrics, folder, generator.name))
        run_id = log_synth(tracker, cfg.get("run_name") or f"synth-{dataset.name}-{generator.name}",
                           config, metrics, {"dataset_fingerprint": tag, "generator": generator.name}, folder)
        if run_id:
            print(f"tracked: {tracker.where()}, run {run_id}; dataset_fingerprint {tag}")
        if synth.get("mlflow_dataset"):
            written, digest = to_mlflow_dataset(tracker, synth.mlflow_dataset, folder)
            print(f"MLflow evaluation dataset {synth.mlflow_dataset!r}: {written} records merged, digest {digest} "
                  f"(python -m ragexp dataset=mlflow dataset.name={synth.mlflow_dataset} system=...)")
    except RagexpError as err:
        print(f"ragexp: error: {err}", file=sys.stderr)
        sys.exit(2)


def dry_run(session, generator, plan, asked: dict[str, int]) -> str:
    """What the first round would send (one source per question asked; rejected candidates are
    replaced in later rounds, up to synth.max_attempts per question)."""
    if not session.components:
        return f"ragexp synth dry run: the {generator.name} generator sends no LLM request"
    requests = [r for type_, n in asked.items() for _ in range(n)
                for source in [plan.next(type_)] if source is not None for r in generator.planned_requests_for(source)]
    estimate = RoleEstimate.of(ROLE, generator.endpoint, session.prices, requests)
    return (f"ragexp synth dry run: no LLM request made; the first round would send {estimate.requests} requests to "
            f"{estimate.model} at {estimate.base_url}: ~{estimate.input_tokens:,} input tokens, <= "
            f"{estimate.output_tokens:,} output tokens, <= ${estimate.cost_usd:.4f} (rejected candidates are replaced "
            "in later rounds: up to synth.max_attempts times as many)")
