"""The LLM generators (`openai`, `local`, ...): any OpenAI-compatible chat endpoint."""
from __future__ import annotations

import time
from typing import Sequence

from ragexp.errors import QuestionFailed
from ragexp.llm.client import ChatRequest
from ragexp.llm.component import UsesLLM
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Template, numbered_context, template_problems
from ragexp.types import Answer, Hit, Question
from ragexp.base.settings import PositiveInt, Temperature
from ragexp.components.generators.base import Generator


class OpenAIGenerator(UsesLLM, Generator):
    """Chat generation over any OpenAI-compatible endpoint, from the retrieved chunks numbered
    `[Doc N]`. The default prompt asks for `[Doc N]` citations and for "I don't know" when the
    documents do not hold the answer. The prompts are templates with the fields {question} and
    {context}."""

    fields = ("question", "context")

    def __init__(self, endpoint: Endpoint, system_prompt: str, user_prompt: str, temperature: Temperature,
                 max_tokens: PositiveInt):
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
