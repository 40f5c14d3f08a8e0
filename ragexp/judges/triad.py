"""The RAG triad (specification chapter 6.2): context relevance by sentence extraction,
faithfulness by claim extraction and verification, answer relevance on 1-5; all on 0-1."""
from __future__ import annotations

import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

from ragexp.errors import UnreadableReply
from ragexp.judges.llm_base import LLMJudgeBase
from ragexp.llm.client import ChatRequest, JsonMode
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.logprobs import Logprobs, offsets_of, probability_true, scale_value
from ragexp.llm.prompts import Template, numbered_context, numbered_lines, template_problems
from ragexp.llm.replies import Unreadable, boolean, clamped, integer, items, number, text, text_bound
from ragexp.base.text import split_sentences
from ragexp.store.tracing import in_this_span
from ragexp.types import Answer, Hit, Judgement, Question
from ragexp.base.settings import PositiveInt, Temperature

T = TypeVar("T")

# what each of the three steps gives (a step whose reply stays unreadable fails these for the question)
STEP_METRICS = (("context_relevance",), ("faithfulness", "claim_hallucination_rate", "hallucination"), ("answer_relevance",))

# the four requests and the fields of their prompts
STEPS = {
    "context_relevance": ("question", "sentences"),
    "claims": ("question", "answer"),
    "verification": ("context", "claims"),
    "answer_relevance": ("question", "answer"),
}


class TriadJudge(LLMJudgeBase):
    """Per question, up to four requests (three when the answer makes no claim):

    - context_relevance = relevant sentences / all sentences of the retrieved context: the
      judge gets the context split into numbered sentences and names the relevant ones;
    - faithfulness = supported claims / claims: the judge lists the answer's atomic claims, then
      gives a verdict on every claim against the context in one request (no claim: 1);
    - answer_relevance = (score 1-5 - 1) / 4;
    - claim_hallucination_rate = unsupported claims / claims (0 when the answer makes no claim; the
      specification's 6.4.1 hallucination rate, averaged as avg_claim_hallucination_rate);
    - hallucination = some claim is unsupported (as for every judge: the run's hallucination_rate
      is the share of questions with a hallucination).

    `prompts` holds a `system` and a `user` template per step (see STEPS for the fields).

    The context goes once into each request that needs it: as numbered sentences to context
    relevance, as documents to verification. Context relevance, the claims and answer relevance
    do not depend on each other and are sent together; verification follows the claims' reply.
    Of the questions judged at once, the claims requests go out first (see ClaimsFirst)."""

    metrics = ("context_relevance", "faithfulness", "answer_relevance", "claim_hallucination_rate")
    needs_contexts = ("context_relevance", "faithfulness", "claim_hallucination_rate")
    scales = {metric: (0.0, 1.0) for metric in metrics}
    scorecard = {"faithfulness": "faithfulness"}
    kind = "triad"
    parallel = True  # False: the steps one after another (CR, claims, verification, AR), as the tests' reference

    def __init__(self, endpoint: Endpoint, prompts: dict[str, dict[str, str]], reask_prompt: str,
                 temperature: Temperature, max_tokens: PositiveInt, json_mode: JsonMode,
                 repeats: PositiveInt, name: str | None, logprobs: Logprobs):
        super().__init__(endpoint, reask_prompt, temperature, max_tokens, json_mode, repeats, name, logprobs)
        self.prompts = {step: tuple(Template(prompts[step][part], fields, f"judge.prompts.{step}.{part}")
                                    for part in ("system", "user")) for step, fields in STEPS.items()}
        self.claims_first = ClaimsFirst()  # the order of the requests of the questions judged at once

    @classmethod
    def constraints(cls, prompts: dict, reask_prompt: str, **_) -> list[str]:
        """Every step's two prompts and their fields, checked by ragexp.validation before any work."""
        problems = template_problems(("problem",), reask_prompt=reask_prompt)
        for step, fields in STEPS.items():
            pair = prompts.get(step) or {}
            if "system" not in pair or "user" not in pair:
                problems.append(f"prompts.{step}: needs a system and a user template")
            else:
                problems += template_problems(fields, **{f"prompts.{step}.{part}": pair[part] for part in ("system", "user")})
        return problems

    def step(self, step: str, repeat: int, count: int = 0, **values: str) -> ChatRequest:
        """The request of `step`; `count`: how many sentences or claims it numbers (its reply's schema)."""
        system, user = self.prompts[step]
        return self.request(system.render(**values), user.render(**values), repeat, tuple(values.values()),
                            step_schema(step, count, self.max_tokens))

    def plan_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> list[ChatRequest]:
        """The requests for one repeat; the answer's sentences stand in for the claims it will have."""
        sentences = context_sentences(hits)
        requests = [self.step("context_relevance", repeat, len(sentences), question=question.text,
                              sentences=numbered_lines(sentences))] if sentences else []
        if answer.text.strip():
            requests.append(self.step("claims", repeat, question=question.text, answer=answer.text))
            stand_in = split_sentences(answer.text)
            if stand_in and hits:
                requests.append(self.step("verification", repeat, len(stand_in), context=numbered_context(hits),
                                          claims=numbered_lines(stand_in)))
        requests.append(self.step("answer_relevance", repeat, question=question.text, answer=answer.text or "(empty answer)"))
        return requests

    def judge_once(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int) -> Judgement:
        """The three independent steps at once (`parallel`): context relevance, the claims then
        their verification, answer relevance. The outcome is the sequential order's: clamped values
        are counted step by step in that order and the first step whose request failed fails the
        question. A step whose reply stays unreadable after its re-ask fails only its metrics
        (`failed_criteria`, never scored); the question fails when every step's did."""
        sentences = context_sentences(hits)
        order = self.claims_first if self.parallel else None
        if order is not None:
            order.coming()
        outcomes = together(self.parallel,
                            lambda: self.context_relevance(question, sentences, repeat, order),
                            lambda: self.faithfulness(question, hits, answer, repeat, order),
                            lambda: self.answer_relevance(question, answer, repeat, order))
        values: list[Any] = []  # each step's value (its own type), None when its reply was unreadable
        failed: dict[str, str] = {}
        for outcome, metrics in zip(outcomes, STEP_METRICS):
            if isinstance(unread := outcome.exception(), UnreadableReply):
                failed.update(dict.fromkeys(metrics, str(unread).partition(": ")[2]))  # without the role's "judge: "
                values.append(None)
                continue
            value, out_of_range = outcome.result()  # raises what the step raised
            self.clamped(out_of_range)
            values.append(value)
        if all(v is None for v in values):
            raise next(o.exception() for o in outcomes if o.exception() is not None)  # type: ignore[misc]
        relevant, faithful, relevance = values
        scores, parts, details = {}, [], {}
        if relevant is not None:
            scores["context_relevance"] = round(len(relevant) / len(sentences), 4) if sentences else 0.0
            parts.append(f"{len(relevant)} of {len(sentences)} context sentences relevant")
            details.update({"context_sentences": len(sentences), "relevant_sentences": relevant})
        hallucination = None
        sampled: dict[str, float] = {}
        if faithful is not None:
            claims, verdicts = faithful
            supported = sum(ok for ok, _, _ in verdicts)
            unsupported = [c for c, (ok, _, _) in zip(claims, verdicts) if not ok]
            scores["faithfulness"] = round(supported / len(claims), 4) if claims else 1.0
            scores["claim_hallucination_rate"] = round(len(unsupported) / len(claims), 4) if claims else 0.0
            if claims and all(chance is not None for _, _, chance in verdicts):  # each claim's probability of support
                sampled.update({m: scores[m] for m in ("faithfulness", "claim_hallucination_rate")})
                scores["faithfulness"] = round(sum(chance for _, _, chance in verdicts) / len(claims), 4)
                scores["claim_hallucination_rate"] = round(1 - scores["faithfulness"], 4)
            hallucination = bool(unsupported)
            parts.append((f"{supported} of {len(claims)} claims supported" if claims else "the answer makes no claim")
                         + (f" (unsupported: {'; '.join(unsupported)})" if unsupported else ""))
            details.update({"claims": claims, "claim_verdicts": [
                {"claim": c, "supported": ok, "reason": r, **({"p_supported": chance} if chance is not None else {})}
                for c, (ok, r, chance) in zip(claims, verdicts)]})
        if relevance is not None:
            score, why, written = relevance
            scores["answer_relevance"] = round((score - 1) / 4, 4)
            parts.append(f"answer relevance {written if written is not None else score:g}/5: {why}")
            details["answer_relevance_score"] = score
            if written is not None:
                sampled["answer_relevance"] = round((written - 1) / 4, 4)
        if sampled:
            details["sampled"] = sampled
        if failed:
            assert self.client is not None  # the steps asked through it
            self.client.count("failed_criteria", len(failed))
            details["failed_criteria"] = failed
        return Judgement(self.name, {m: scores[m] for m in self.metrics if m in scores}, hallucination,
                         "; ".join(parts), details)

    def context_relevance(self, question: Question, sentences: list[str], repeat: int,
                          order: ClaimsFirst | None = None) -> tuple[list[str], int]:
        """The relevant sentences (none without context) and how many numbers were out of range."""
        if not sentences:
            return [], 0
        if order is not None:
            order.after_claims()
        numbers, ignored = self.ask_json(
            self.step("context_relevance", repeat, len(sentences), question=question.text,
                      sentences=numbered_lines(sentences)),
            lambda reply: read_numbers(reply, "relevant", len(sentences)))
        return [sentences[n - 1] for n in numbers], ignored

    def faithfulness(self, question: Question, hits: Sequence[Hit], answer: Answer, repeat: int,
                     order: ClaimsFirst | None = None) -> tuple[tuple[list[str], list[tuple[bool, str, float | None]]], int]:
        """The answer's claims and a verdict on each (asked once the claims are known), and how
        many verdicts named a claim out of range."""
        claims = []
        try:
            request = self.step("claims", repeat, question=question.text, answer=answer.text) if answer.text.strip() else None
        finally:
            if order is not None:
                order.going()
        if request is not None:
            claims = self.ask_json(request, read_claims)
        if not claims:
            return (claims, []), 0
        if not hits:  # nothing retrieved: nothing supports them
            return (claims, [(False, "nothing was retrieved", None)] * len(claims)), 0
        (verdicts, ignored), reply = self.ask_json_reply(
            self.step("verification", repeat, len(claims), context=numbered_context(hits), claims=numbered_lines(claims)),
            lambda reply: read_verdicts(reply, len(claims)))
        return (claims, supported_chances(verdicts, reply)), ignored

    def answer_relevance(self, question: Question, answer: Answer, repeat: int,
                         order: ClaimsFirst | None = None) -> tuple[tuple[float, str, float | None], int]:
        """The 1-5 score (probability-weighted where the reply's log-probabilities tell), its reasoning
        and the score written when weighted; and 1 when the score was clamped into 1-5."""
        if order is not None:
            order.after_claims()
        ((score, moved), why), reply = self.ask_json_reply(
            self.step("answer_relevance", repeat, question=question.text, answer=answer.text or "(empty answer)"),
            read_score)
        weighted = scale_value(reply, "score", 1.0, 5.0)
        return (score if weighted is None else weighted, why, score if weighted is not None else None), int(moved)


class ClaimsFirst:
    """Of the questions judged at once, every claims request goes out before any context- or
    answer-relevance request: the claims start each question's longer chain (the claims, then their
    verification), so the last of them, and the second round after it, start sooner. A step waits
    at most `wait_s` for the claims, so a slow one never holds the others long."""

    def __init__(self, wait_s: float = 0.05):
        self.coming_claims, self.wait_s = 0, wait_s
        self.changed = threading.Condition()

    def coming(self) -> None:
        """A question's claims request is to go out."""
        with self.changed:
            self.coming_claims += 1

    def going(self) -> None:
        """A question's claims request goes out now (or never: its answer is empty)."""
        with self.changed:
            self.coming_claims -= 1
            if not self.coming_claims:
                self.changed.notify_all()

    def after_claims(self) -> None:
        """Wait until no claims request is still to go out (at most `wait_s`)."""
        with self.changed:
            self.changed.wait_for(lambda: self.coming_claims <= 0, timeout=self.wait_s)


def together(parallel: bool, *steps: Callable[[], T]) -> list[Future[T]]:
    """Each step's outcome (its value or what it raised), in the order of `steps`, all finished:
    with `parallel` each step in a thread of its own (their requests still wait for the
    endpoint's `max_concurrency` slots), else one after another up to the first that failed
    other than by an unreadable reply (which fails only that step's metrics)."""
    if not parallel or len(steps) < 2:
        outcomes: list[Future[T]] = []
        for step in steps:
            outcomes.append(settled(step))
            failure = outcomes[-1].exception()
            if failure is not None and not isinstance(failure, UnreadableReply):
                break
        return outcomes
    with ThreadPoolExecutor(max_workers=len(steps), thread_name_prefix="ragexp-triad") as pool:
        return [pool.submit(in_this_span(step)) for step in steps]  # leaving `with` waits for every step


def settled(step: Callable[[], T]) -> Future[T]:
    future: Future[T] = Future()
    try:
        future.set_result(step())
    except BaseException as err:  # handed on by Future.result, as a pool would
        future.set_exception(err)
    return future


def context_sentences(hits: Sequence[Hit]) -> list[str]:
    return [s for hit in hits for s in split_sentences(hit.chunk.text)]


def read_numbers(reply: dict, name: str, count: int) -> tuple[list[int], int]:
    """Distinct sentence numbers in 1..count, in order, and how many given numbers were out of range."""
    numbers, ignored = [], 0
    for value in items(reply, name):
        n = integer(value, f"a number in {name}")
        if not 1 <= n <= count:
            ignored += 1
        elif n not in numbers:
            numbers.append(n)
    return sorted(numbers), ignored


def read_claims(reply: dict) -> list[str]:
    claims = []
    for value in items(reply, "claims"):
        if not isinstance(value, str):
            raise Unreadable(f"a claim is not a string: {value!r}")
        if value.strip():
            claims.append(" ".join(value.split()))
    return claims


def read_verdicts(reply: dict, count: int) -> tuple[list[tuple[bool, str]], int]:
    """(supported, reason) for claims 1..count; every claim needs a verdict."""
    found: dict[int, tuple[bool, str]] = {}
    ignored = 0
    for entry in items(reply, "verdicts"):
        if not isinstance(entry, dict):
            raise Unreadable(f"a verdict is not an object: {entry!r}")
        n = integer(entry.get("claim"), "a verdict's claim number")
        if not 1 <= n <= count:
            ignored += 1
            continue
        reason = entry.get("reason")
        found.setdefault(n, (boolean(entry, "supported"), reason.strip() if isinstance(reason, str) else ""))
    missing = [n for n in range(1, count + 1) if n not in found]
    if missing:
        raise Unreadable(f"no verdict for claim {', '.join(map(str, missing))}")
    return [found[n] for n in range(1, count + 1)], ignored


def supported_chances(verdicts: list[tuple[bool, str]], reply) -> list[tuple[bool, str, float | None]]:
    """Each claim's verdict with its probability of being supported where the reply's token
    log-probabilities tell (None elsewhere): read at the `supported` value of its entry, when the
    reply gives one entry per claim, in order."""
    chances: list[float | None] = [None] * len(verdicts)
    offsets = offsets_of(reply.text, "supported") if reply.logprobs else []
    if offsets and len(offsets) == len(verdicts):
        try:
            entries = json.loads(reply.text)["verdicts"]
            numbers = [int(e["claim"]) for e in entries]
        except (ValueError, KeyError, TypeError):
            numbers = []
        if numbers == list(range(1, len(verdicts) + 1)):
            chances = [probability_true(reply.logprobs, reply.text, at) for at in offsets]
    return [(ok, why, chance) for (ok, why), chance in zip(verdicts, chances)]


MAX_CLAIMS = 10  # the claims a reply may list (its schema): a model that runs on ends the list before max_tokens


def step_schema(step: str, count: int, max_tokens: int) -> dict:
    """The JSON schema of a step's reply, as its prompt describes it; `count`: how many sentences
    (context relevance) or claims (verification) the request numbers. Its strings are short enough
    that the reply ends within `max_tokens` (`text_bound`)."""
    numbers = {"type": "integer", "minimum": 1, **({"maximum": count} if count else {})}
    shapes: dict[str, dict] = {
        "context_relevance": {"relevant": {"type": "array", **({"maxItems": count} if count else {}), "items": numbers}},
        "claims": {"claims": {"type": "array", "maxItems": MAX_CLAIMS, "items": {
            "type": "string", "maxLength": text_bound(max_tokens, MAX_CLAIMS, 20 + 4 * MAX_CLAIMS, 300)}}},
        "verification": {"verdicts": {"type": "array", **({"minItems": count, "maxItems": count} if count else {}),
                                      "items": {"type": "object", "properties": {
                                          "claim": numbers, "supported": {"type": "boolean"},
                                          "reason": {"type": "string",
                                                     "maxLength": text_bound(max_tokens, count, 20 + 20 * count, 200)}},
                                          "required": ["claim", "supported", "reason"], "additionalProperties": False}}},
        "answer_relevance": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                             "reasoning": {"type": "string", "maxLength": text_bound(max_tokens, 1, 30, 400)}},
    }
    properties = shapes[step]
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def read_score(reply: dict) -> tuple[tuple[float, bool], str]:
    return clamped(number(reply, "score"), 1.0, 5.0), text(reply, "reasoning")
