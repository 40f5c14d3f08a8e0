"""One run's working state (`Work`: the stage cache, the shared embedding cache, each stage's
time) and its data (`load`: the loader's dataset on the question sample)."""
from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ragexp.base.progress import loading_seconds
from ragexp.components.embedders import EmbeddingCache
from ragexp.errors import RagexpError
from ragexp.run.rerank import STAGE as RERANK_STAGE
from ragexp.store.cache import StageCache, key_of, stage_code_hash
from ragexp.types import Chunk, Dataset

if TYPE_CHECKING:
    from ragexp.datasets.subset import QuestionSample
    from ragexp.store.tracing import TraceRecorder

log = logging.getLogger(__name__)


class Work:
    """One run's working state, made by `run()` and dropped with it: the stage cache, the
    embedding cache shared by every embedder of the run (with the stage cache's on-disk store
    when caching is on), and the wall time of each stage (`seconds[stage]`) and the process's CPU
    time in it, every thread's (`seconds[stage + "_cpu"]`)."""

    # stage -> its folder in the stage cache
    STORED_AS = {"chunking": "chunks", "retrieval": "hits", RERANK_STAGE: "reranked", "answer": "answers",
                 "judgement": "judgements"}

    def __init__(self, cache: StageCache):
        self.cache = cache
        self.embeddings = EmbeddingCache.beside(cache)
        self.seconds: dict[str, float] = {}
        self.traces: TraceRecorder | None = None  # tracing=on: the traced questions' spans

    def stage(self, name: str, key: str | None, compute: Callable, *args):
        """`compute(*args)`, timed as stage `name` (logged as it goes, kept in `seconds`); with a
        `key`, served from the stage cache when stored there, else computed and stored."""
        started, cpu_started = time.perf_counter(), time.process_time()
        value = self.cached(name, key, compute, *args) if key is not None else compute(*args)
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - started, 4)
        self.seconds[f"{name}_cpu"] = round(self.seconds.get(f"{name}_cpu", 0.0) + time.process_time() - cpu_started, 4)
        log.info("%s: %.2fs (cpu %.2fs)", name, self.seconds[name], self.seconds[f"{name}_cpu"])
        return value

    def cached(self, name: str, key: str, compute: Callable, *args, span: dict | None = None,
               expect: Callable[[Any], str | None] | None = None, keep: Callable[[Any], bool] | None = None):
        """`compute(*args)` through the stage cache, not timed (a per-question step of a stage); a
        traced `span` is told whether the cache served it (`ragexp.store.cache`: hit or miss);
        `expect`: what is wrong with a stored value, or None; `keep`: whether a computed value is
        stored (see StageCache.cached)."""
        computed = []

        def compute_and_note():
            computed.append(True)
            return compute(*args)

        value = self.cache.cached(self.STORED_AS[name], key, compute_and_note, expect, keep)
        if span is not None:
            span["attributes"]["ragexp.cache"] = "miss" if computed else "hit"
        return value

    def holds(self, name: str, key: str) -> bool:
        """Whether `cached(name, key, ...)` would be served from the stage cache (its entry exists)."""
        return self.cache.holds(self.STORED_AS[name], key, self.cached)  # stored under Work's code, as `cached` stores

    def span(self, qid: str, name: str, span_type: str, inputs):
        """A traced span of question `qid` around a block (a no-op when tracing is off)."""
        return self.traces.span(qid, name, span_type, inputs) if self.traces is not None else nullcontext()

    def index_then_search(self, retriever, chunks: Sequence[Chunk], queries: list[str], depth: int,
                          question_key: Callable[[str], str] | None = None):
        """Indexes the chunks (timed as `indexing`; its embedded texts counted as
        `index_embedded_texts`), then ranks `depth` chunks per query. Called only when the
        run's hits are not in the stage cache. With `question_key(query)`, each query's ranking
        is looked up and stored on its own (stage `question_hits`): only the queries not stored are
        searched, and nothing is indexed when every one is."""
        keys = [key_of(question_key(q), stage_code_hash(Work.index_then_search)) for q in queries] if question_key else []
        found = {i: hits for i, key in enumerate(keys) if (hits := self.cache.get("question_hits", key)) is not None}
        missing = [i for i in range(len(queries)) if i not in found]
        self.cache.stats["question_hits_cached"] += len(found) if keys else 0
        self.cache.stats["question_hits_computed"] += len(missing) if keys else 0
        if missing:
            before = self.embeddings.stats["embedded_texts"]
            self.stage("indexing", None, retriever.index, chunks)
            self.embeddings.stats["index_embedded_texts"] += self.embeddings.stats["embedded_texts"] - before
            for i, hits in zip(missing, retriever.search([queries[i] for i in missing], depth)):
                found[i] = hits
                if keys:
                    self.cache.put("question_hits", keys[i], hits)
        return [found[i] for i in range(len(queries))]


OWN = "own"  # the run's own time in `Work.seconds` (logged as time_own_s): its stages', model loading apart
OWN_STORED_AS = "stage_seconds"  # the stage cache's folder of what each stored stage entry took to compute


def own_stage(work: Work, name: str, key: str | None, compute: Callable, *args):
    """`work.stage(name, key, compute, *args)` for a stage of the run's own (not one inside
    another), its time added to the run's own time (`work.seconds["own"]`, logged as `time_own_s`):
    its wall time without the models loaded meanwhile (ragexp.base.progress.loading), and for a
    stage the cache served, the time it took when it was computed (kept beside its entry): what the
    configuration costs, whichever job of a sweep loaded the model or filled the cache first. (Not a
    method of Work: Work's code is in the key of the stages it computes, index_then_search.)"""
    started, loaded = time.perf_counter(), loading_seconds()
    stored_as = Work.STORED_AS.get(name, name)
    computed_before = work.cache.stats[f"{stored_as}_computed"]
    value = work.stage(name, key, compute, *args)
    own = max(0.0, time.perf_counter() - started - (loading_seconds() - loaded))
    if key is not None:
        if work.cache.stats[f"{stored_as}_computed"] > computed_before:
            work.cache.put(OWN_STORED_AS, key, round(own, 4))
        else:  # served from the cache: what computing it took (for an entry stored without it, reading it)
            stored = work.cache.get(OWN_STORED_AS, key)
            own = float(stored) if isinstance(stored, (int, float)) and not isinstance(stored, bool) else own
    work.seconds[OWN] = round(work.seconds.get(OWN, 0.0) + own, 4)
    return value


def load(loader, sample: QuestionSample | None = None) -> Dataset:
    """The loader's dataset, on the `question_sample` of its questions when one is set."""
    dataset = loader.load()
    if sample is not None:
        dataset = sample.apply(dataset)
    if not dataset.questions:
        raise RagexpError(f"dataset: no questions in {dataset.name} (check dataset.path and dataset.limit)")
    return dataset
