"""The single-call LLM judge: one request per question (and repeat) scores context relevance, answer
similarity, faithfulness and hallucination together."""
from __future__ import annotations

from typing import Sequence

from ragexp.judges.llm_base import LLMJudgeBase
from ragexp.llm.client import ChatRequest, JsonMode
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.logprobs import Logprobs, probability_of, scale_value
from ragexp.llm.prompts import Template, numbered_context, template_problems
from ragexp.llm.replies import Unreadable, boolean, clamped, number, text, text_bound
from ragexp.types import Answer, Hit, Judgement, Question
from ragexp.base.settings import PositiveInt, Temperature

LOW, HIGH = 1.0, 10.0

REASONING_CHARS = 400  # the schema's bound on `reasoning` (two or three sentences), less when max_tokens is lower
SKELETON_TOKENS = 60  # the reply's JSON but its reasoning, in tokens


def reply_schema(max_tokens: int) -> dict:
    """The reply's JSON schema, as the prompt describes it (endpoints that take one constrain the
    reply to it), its reasoning short enough to end within `max_tokens`."""
    reasoning = text_bound(max_tokens, 1, SKELETON_TOKENS, REASONING_CHARS)
    return {
        "type": "object",
        "properties": {**{m: {"type": "integer", "minimum": 1, "maximum": 10}
                          for m in ("context_relevance", "answer_similarity", "faithfulness")},
                       "hallucination": {"type": "boolean"},
                       "reasoning": {"type": "string", "maxLength": reasoning}},
        "required": ["context_relevance", "answer_similarity", "faithfulness", "hallucination", "reasoning"],
        "additionalProperties": False,
    }


UNANSWERABLE = ("UNANSWERABLE: the corpus holds no answer to this question; abstaining (\"I don't know\") "
                "is the correct answer")


NO_REFERENCE = "(no reference answer given: score answer_similarity 1; it is not used)"


def expected_text(question: Question) -> str:
    """What the judge is told to expect: the expected answer, the alternatives (any of them is
    right), or that the question is unanswerable."""
    if not question.answerable:
        return UNANSWERABLE
    if len(question.answers) > 1:
        return "any of:\n" + "\n".join(f"- {a}" for a in question.answers)
    return question.expected or NO_REFERENCE


class LLMJudge(LLMJudgeBase):
    """Sends the question, the retrieved context (numbered chunks), the expected and the generated
    answer; reads `context_relevance`, `answer_similarity`, `faithfulness` (1-10; values outside
    are clamped and counted), `hallucination` (true/false) and `reasoning` from the JSON reply.
    The prompts are templates with the fields {question}, {context}, {expected}, {generated}."""

    metrics = ("context_relevance", "answer_similarity", "faithfulness")
    scales = {metric: (1.0, 10.0) for metric in metrics}
    scorecard = {"faithfulness": "faithfulness"}
    needs_reference = ("answer_similarity",)
    needs_contexts = ("context_relevance", "faithfulness")
    fields = ("question", "context", "expected", "generated")
    kind = "llm"

    def __init__(self, endpoint: Endpoint, system_prompt: str, user_prompt: str, reask_prompt: str,
                 temperature: Temperature, max_tokens: PositiveInt, json_mode: JsonMode,
                 repeats: PositiveInt, name: str | None, logprobs: Logprobs):
        super().__init__(endpoint, reask_prompt, temperature, max_tokens, json_mode, repeats, name, logprobs)
        self.system = Template(system_prompt, self.fields, "judge.system_prompt")
        self.user = Template(user_prompt, self.fields, "judge.user_prompt")

    @classmethod
    def constraints(cls, system_prompt: str, user_prompt: str, reask_prompt: str, **_) -> list[str]:
        """The prompts' fields, checked by ragexp.validation before any work."""
        return [*template_problems(cls.fields, system_prompt=system_prompt, user_prompt=user_prompt),
                *template_problems(("problem",), reask_prompt=reask_prompt)]

    def plan_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> list[ChatRequest]:
        values = {"question": question.text, "context": numbered_context(hits) or "(nothing was retrieved)",
                  "expected": expected_text(question), "generated": answer.text.strip() or "(empty answer)"}
        return [self.request(self.system.render(**values), self.user.render(**values), repeat, tuple(values.values()),
                             reply_schema(self.max_tokens))]

    def judge_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> Judgement:
        [request] = self.plan_once(question, hits, answer, repeat)
        (scores, hallucination, reasoning, out_of_range, failed), reply = self.ask_json_reply(request, self.read,
                                                                                            self.salvage)
        self.clamped(len(out_of_range))
        details: dict = {"clamped": out_of_range} if out_of_range else {}
        sampled: dict = {}
        for metric in scores:
            weighted = scale_value(reply, metric, LOW, HIGH)
            if weighted is not None:
                sampled[metric], scores[metric] = scores[metric], weighted
        chance = probability_of(reply, "hallucination") if hallucination is not None else None
        if chance is not None:
            sampled["hallucination"] = hallucination
        if sampled:
            details["sampled"] = sampled
        if failed:
            assert self.client is not None  # asked through it
            self.client.count("failed_criteria", len(failed))
            details["failed_criteria"] = failed
        return Judgement(self.name, scores, hallucination if chance is None else chance, reasoning, details)

    @classmethod
    def read(cls, reply: dict, failed: dict[str, str] | None = None
             ) -> tuple[dict[str, float], bool | None, str, list[str], dict[str, str]]:
        """Scores (clamped into 1-10), hallucination, reasoning, the values clamped, and the fields
        that failed. Strict without `failed` (Unreadable at the first unusable field, so the judge
        re-asks); with it, each unusable field is put there with the reason and left out."""
        def field(name: str, read):
            try:
                return read(reply, name)
            except Unreadable as err:
                if failed is None:
                    raise
                failed[name] = f"unreadable reply after a re-ask: {err}"
                return None

        scores, out_of_range = {}, []
        for metric in cls.metrics:
            given = field(metric, number)
            if given is None:
                continue
            scores[metric], moved = clamped(given, LOW, HIGH)
            if moved:
                out_of_range.append(f"{metric}: {given:g} -> {scores[metric]:g}")
        hallucination = field("hallucination", boolean)
        reasoning = text(reply, "reasoning") if failed is None else (field("reasoning", text) or "")
        if failed is not None:
            failed.pop("reasoning", None)  # a missing reasoning costs nothing
        return scores, hallucination, reasoning, out_of_range, failed if failed is not None else {}

    @classmethod
    def salvage(cls, reply: dict) -> tuple[dict[str, float], bool | None, str, list[str], dict[str, str]] | None:
        """A verdict still unreadable after its re-ask: the metrics it gives, each of the others
        failed for this question with the reason (never scored); None when it gives none (the
        question fails)."""
        read = cls.read(reply, failed={})
        return read if read[0] else None
