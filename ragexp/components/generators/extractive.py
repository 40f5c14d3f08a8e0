"""Generators: (question, retrieved hits) -> answer. One class per `generator` option."""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from ragexp.errors import QuestionFailed
from ragexp.llm.client import ChatRequest
from ragexp.llm.component import UsesLLM
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Template, numbered_context, template_problems
from ragexp.base.text import split_sentences
from ragexp.types import Answer, Hit, Question
from ragexp.base.settings import Cosine, PositiveInt, Temperature


class ExtractiveGenerator:
    """Offline baseline: answers with the retrieved sentences most similar to the question
    (cosine of their embeddings), best first, up to `max_sentences` and `max_chars`. Abstention
    rule: when even the best sentence's cosine with the question is below `abstain_below` (null:
    never), it answers `abstention` instead ("I don't know."); with nothing retrieved, it answers
    the empty string (which also counts as abstaining).

    Its answers are context sentences copied as they are, so every judge that checks them against
    the context finds them faithful: faithfulness, hallucination and claim_hallucination_rate hold
    by construction (`holds_by_construction`; the console and run.json say so instead of rating
    them against their targets)."""

    holds_by_construction = ("faithfulness", "hallucination", "claim_hallucination_rate")

    def __init__(self, embedder, max_sentences: PositiveInt = 2, max_chars: PositiveInt = 400,
                 abstain_below: Cosine | None = None, abstention: str = "I don't know."):
        self.embedder = embedder
        self.max_sentences, self.max_chars = max_sentences, max_chars
        self.abstain_below, self.abstention = abstain_below, abstention

    def generate(self, question: str, hits: Sequence[Hit]) -> Answer:
        started = time.perf_counter()
        sentences = list(dict.fromkeys(s for hit in hits for s in split_sentences(hit.chunk.text)))
        if not sentences:
            return Answer("", time.perf_counter() - started)
        vectors = self.embedder.embed([question, *sentences])
        similarity = vectors[1:] @ vectors[0]
        if self.abstain_below is not None and float(similarity.max()) < self.abstain_below:
            return Answer(self.abstention, time.perf_counter() - started)
        order = np.argsort(-similarity, kind="stable")
        chosen: list[str] = []
        for i in order[: self.max_sentences]:
            if chosen and len(" ".join([*chosen, sentences[i]])) > self.max_chars:
                break
            chosen.append(sentences[i][: self.max_chars])
        return Answer(" ".join(chosen), time.perf_counter() - started)


class OpenAIGenerator(UsesLLM):
    """Chat generation over any OpenAI-compatible endpoint, from the retrieved chunks numbered
    `[Doc N]`. The default prompt asks for `[Doc N]` citations and for "I don't know" when the
    documents do not hold the answer. The prompts are templates with the fields {question} and
    {context}."""

    fields = ("question", "context")

    def __init__(self, endpoint: Endpoint, system_prompt: str, user_prompt: str, temperature: Temperature = 0.0,
                 max_tokens: PositiveInt = 300):
        self.endpoint, self.temperature, self.max_tokens = endpoint, float(temperature), max_tokens
        self.system = Template(system_prompt, self.fields, "generator.system_prompt")
        self.user = Template(user_prompt, self.fields, "generator.user_prompt")

    @classmethod
    def constraints(cls, system_prompt: str, user_prompt: str, **_) -> list[str]:
        """The prompts' fields, checked by ragexp.validation before any work."""
        return template_problems(cls.fields, system_prompt=system_prompt, user_prompt=user_prompt)

    def request(self, question: str, hits: Sequence[Hit]) -> ChatRequest:
        values = {"question": question, "context": numbered_context(hits) or "(no documents were retrieved)"}
        return ChatRequest((("system", self.system.render(**values)), ("user", self.user.render(**values))),
                           self.temperature, self.max_tokens)

    def planned_requests(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[ChatRequest]:
        return [self.request(question.text, hits)]

    def generate(self, question: str, hits: Sequence[Hit]) -> Answer:
        started = time.perf_counter()
        request = self.request(question, hits)
        reply = self.ask(request, store=False)
        if not reply.text.strip() and reply.cached:  # an empty reply cached by an older ragexp: ask afresh
            reply = self.ask(request, store=False, use_cache=False)
        if not reply.text.strip():
            raise QuestionFailed("generator: the endpoint replied with an empty answer")  # never cached
        assert self.client is not None  # ask() raised without one
        self.client.store(request, reply)
        return Answer(reply.text.strip(), time.perf_counter() - started)
