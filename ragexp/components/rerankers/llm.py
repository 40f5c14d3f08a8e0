"""The `llm` reranker: an LLM endpoint ranks the candidates."""
from __future__ import annotations

import json
import re
from functools import partial
from typing import Literal, Sequence

from ragexp.llm.client import ChatRequest, JsonMode, parse_json_mode
from ragexp.llm.component import AsksForJSON
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Delimited, Template, neutralise, template_problems
from ragexp.llm.replies import Unreadable, integer, items, number
from ragexp.types import Answer, Hit, Question
from ragexp.base.settings import PositiveInt, Temperature
from ragexp.components.rerankers.base import Reranker, ranked


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
                 reask_prompt: str, mode: Literal["listwise", "pointwise"], candidates: PositiveInt,
                 temperature: Temperature, max_tokens: PositiveInt, json_mode: JsonMode,
                 max_chars: PositiveInt):
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

    def request(self, user: str, data: tuple[str, ...], schema: dict) -> ChatRequest:
        return ChatRequest((("system", self.system.render()), ("user", user)), self.temperature, self.max_tokens,
                           self.json_mode, schema=json.dumps(schema), data=data)

    def requests(self, question: Question, hits: Sequence[Hit]) -> list[ChatRequest]:
        if self.mode == "listwise":
            documents = candidate_list(hits, self.max_chars)
            return [self.request(self.listwise.render(question=question.text, count=Delimited(str(len(hits))),
                                                      documents=documents), (question.text, documents),
                                 reply_schema("ranking", {"type": "array", "maxItems": len(hits), "items": {
                                     "type": "integer", "minimum": 1, "maximum": len(hits)}}))]
        shown = [" ".join(h.chunk.text.split())[: self.max_chars] for h in hits]
        relevance = reply_schema("relevance", {"type": "integer", "minimum": 0, "maximum": 10})
        return [self.request(self.pointwise.render(question=question.text, document=document), (question.text, document),
                             relevance) for document in shown]

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


def reply_schema(name: str, value: dict) -> dict:
    """The JSON schema of a reply that is one field (endpoints that take one constrain the reply to it)."""
    return {"type": "object", "properties": {name: value}, "required": [name], "additionalProperties": False}


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
