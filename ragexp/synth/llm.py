"""`synth/generator=llm`: one chat request per candidate (the type's prompt over its chunk, or the
two chunks of a multi-hop pair), replying with a JSON object {"question", "answer", "evidence"};
then, for each candidate that passed the offline rules, one more request for a grounding verdict
{"grounded": true/false, "reason"} over the same source (a separate request rather than a
self-check field of the first: a model asked to check its own reply in the same breath rarely
disagrees with it). The endpoint, cache, prices, budget and dry run are the generator's and
judge's (`ragexp.llm`)."""
from __future__ import annotations

import hashlib
import json
from typing import Mapping

from ragexp.errors import RagexpError
from ragexp.base.settings import PositiveInt, Temperature
from ragexp.llm.client import ChatRequest, JsonMode, parse_json_mode
from ragexp.llm.component import AsksForJSON
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Template
from ragexp.llm.replies import Unreadable, boolean, field, text, text_bound
from ragexp.synth import TYPES
from ragexp.synth.candidates import Candidate, Source

SETTING = "synth.generator"


def schema(properties: dict) -> str:
    """A reply's JSON schema (as JSON text): an object with exactly these fields."""
    return json.dumps({"type": "object", "properties": properties, "required": list(properties),
                       "additionalProperties": False})


def question_schema(max_tokens: int) -> str:
    """The question's reply schema, as the prompt describes it (endpoints that take one constrain the
    reply to it): its strings short enough that it ends within `max_tokens` (the answer twice a
    question's share, up to 3 quotes of evidence)."""
    share = text_bound(max_tokens, 6, 40, 400)
    return schema({"question": {"type": "string", "minLength": 1, "maxLength": share},
                   "answer": {"type": "string", "minLength": 1, "maxLength": 2 * share},
                   "evidence": {"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": share}}})


VERDICT_SCHEMA = schema({"grounded": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 150}})  # 200 tokens


def passages(source: Source) -> str:
    return "\n\n".join(f"[Passage {n}] ({c.doc_id})\n{c.text.strip()}" for n, c in enumerate(source.chunks, start=1))


def read_question(reply: dict) -> tuple[str, str, tuple[str, ...]]:
    question, answer = text(reply, "question"), text(reply, "answer")
    if not question or not answer:
        raise Unreadable("question and answer must not be empty")
    evidence = reply.get("evidence", [])
    evidence = [evidence] if isinstance(evidence, str) else evidence
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise Unreadable(f"evidence is not a list of quotes: {evidence!r}")
    return question, answer, tuple(e.strip() for e in evidence if e.strip())


def read_verdict(reply: dict) -> tuple[bool, str]:
    reason = field(reply, "reason") if "reason" in reply else ""
    return boolean(reply, "grounded"), str(reason)


class LLMQuestionGenerator(AsksForJSON):
    """Prompts are templates: `system_prompt` and each `prompts.<type>` with the field {context}
    (the numbered passages); `verify_prompt` with {context}, {question}, {answer}."""

    verifies = True
    counters = ("reasks", "unreadable_replies")

    def __init__(self, endpoint: Endpoint, system_prompt: str, prompts: Mapping[str, str], verify_prompt: str,
                 reask_prompt: str, verify: bool, temperature: Temperature, max_tokens: PositiveInt,
                 json_mode: JsonMode, name: str | None):
        self.endpoint, self.temperature, self.max_tokens = endpoint, float(temperature), max_tokens
        self.json_mode = parse_json_mode(json_mode)
        unknown = set(prompts) - set(TYPES)
        if unknown:
            raise RagexpError(f"{SETTING}.prompts: unknown question type {', '.join(sorted(unknown))}; "
                              f"the types are {', '.join(TYPES)}")
        self.system = Template(system_prompt, ("context",), f"{SETTING}.system_prompt")
        self.prompts = {t: Template(p, ("context",), f"{SETTING}.prompts.{t}") for t, p in prompts.items()}
        self.verify_template = Template(verify_prompt, ("context", "question", "answer"), f"{SETTING}.verify_prompt")
        self.reask_prompt = Template(reask_prompt, ("problem",), f"{SETTING}.reask_prompt")
        self.verifies = bool(verify)
        self.name = name or endpoint.model
        self.types = tuple(self.prompts)

    def prompt_hash(self, type_: str) -> str:
        """What made a question: the system prompt and its type's prompt (12 hex digits)."""
        return hashlib.sha256(f"{self.system.text}\0{self.prompts[type_].text}".encode()).hexdigest()[:12]

    def request(self, source: Source) -> ChatRequest:
        if source.type not in self.prompts:
            raise RagexpError(f"{SETTING}.prompts.{source.type}: no prompt for the question type {source.type!r}")
        context = passages(source)
        return ChatRequest((("system", self.system.render(context=context)),
                            ("user", self.prompts[source.type].render(context=context))),
                           self.temperature, self.max_tokens, self.json_mode, schema=question_schema(self.max_tokens),
                           data=(context,))

    def verify_request(self, candidate: Candidate) -> ChatRequest:
        user = self.verify_template.render(context=passages(candidate.source), question=candidate.question,
                                           answer=candidate.answer)
        return ChatRequest((("user", user),), 0.0, 200, self.json_mode, schema=VERDICT_SCHEMA,
                           data=(passages(candidate.source), candidate.question, candidate.answer))

    def make(self, source: Source, seed: int = 0) -> Candidate:
        """Raises QuestionFailed (unreadable reply after a re-ask, request failed, budget spent)."""
        question, answer, evidence = self.ask_json(self.request(source), read_question)
        return Candidate(source, question, answer, evidence, self.name, self.prompt_hash(source.type))

    def verify(self, candidate: Candidate) -> tuple[bool, str]:
        return self.ask_json(self.verify_request(candidate), read_verdict)

    def planned_requests_for(self, source: Source) -> list[ChatRequest]:
        """For the dry run: the question's request and (when verifying) a verdict over the same source."""
        planned = [self.request(source)]
        if self.verifies:
            planned.append(self.verify_request(Candidate(source, "(question)", "(answer)")))
        return planned
