"""What a generator or judge that sends chat requests has in common."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from ragexp.errors import UnreadableReply
from ragexp.llm.client import ChatClient, ChatRequest, Reply
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Template
from ragexp.llm.replies import Disagreeing, Unreadable, own_objects, read_reply
from ragexp.types import Answer, Hit, Question

T = TypeVar("T")


class UsesLLM:
    """A component with an `endpoint`. The run's `LLMSession.connect` gives it its `client`
    before any work (so a missing key or an unreachable endpoint stops the run first);
    `planned_requests` lists what it would send, for `dry_run=true`."""

    endpoint: Endpoint
    client: ChatClient | None = None
    counters: tuple[str, ...] = ()  # the counters it reports (as <role>_<name>), zero when nothing happened
    sends_requests: bool = True  # False: nothing to ask (a rubric of deterministic criteria only), no client
    config_key: str | None = None  # where its config is, when not at its role's key (judge.expensive in a cascade)

    @property
    def concurrency(self) -> int:
        """How many questions the pipeline hands it at once."""
        return self.endpoint.max_concurrency

    def planned_requests(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[ChatRequest]:
        raise NotImplementedError

    def ask(self, request: ChatRequest, store: bool = True, use_cache: bool = True) -> Reply:
        if self.client is None:
            raise RuntimeError(f"{type(self).__name__} is not connected: LLMSession.connect gives it a client")
        return self.client.complete(request, store, use_cache)


class AsksForJSON(UsesLLM):
    """Asks for a JSON reply; a reply that cannot be read (its verdict: `ragexp.llm.replies`) is
    asked once more with the problem stated (`reask_prompt`, field {problem}), then the question
    fails with the reason. Only a reply that was read is cached (an unreadable one, its re-ask if
    that failed too, never are); a cached reply that cannot be read (left by an older ragexp) is
    asked afresh."""

    counters: tuple[str, ...] = ("reasks", "unreadable_replies", "clamped_values")
    reask_prompt: Template  # with the field {problem}, set by the subclass

    def ask_json(self, request: ChatRequest, read: Callable[[dict], T],
                 salvage: Callable[[dict], T | None] | None = None) -> T:
        """`read` of the reply, asked once more when it cannot be read. Still unreadable: what
        `salvage(object)` makes of the re-ask's one object that is not a quote (a judgement of
        the fields that could be read, the others failed with the reason), else the question
        fails. Verdicts that disagree are never salvaged."""
        return self.ask_json_reply(request, read, salvage)[0]

    def ask_json_reply(self, request: ChatRequest, read: Callable[[dict], T],
                       salvage: Callable[[dict], T | None] | None = None) -> tuple[T, Reply]:
        """`ask_json`'s value and the reply it was read from (its text and token log-probabilities)."""
        reply, value = self.attempt(request, read)
        if not isinstance(value, Unreadable):
            return value, reply
        assert self.client is not None  # ask() raised without one
        self.client.count("reasks")
        followup = request.followed_by(reply.text, self.reask_prompt.render(problem=str(value)))
        again, value = self.attempt(followup, read)
        if isinstance(value, Unreadable):
            self.client.count("unreadable_replies")
            saved = salvaged(again, followup, value, salvage)
            if saved is not None:
                return saved, again
            raise UnreadableReply(f"{self.client.role}: unreadable reply after a re-ask: {value}") from None
        return value, again

    def attempt(self, request: ChatRequest, read: Callable[[dict], T]) -> tuple[Reply, T | Unreadable]:
        """The reply and what `read` made of its verdict, or why it could not be read. Only a reply
        that was read is cached; a cached one that cannot be read (stored by an older ragexp) is
        asked afresh."""
        reply = self.ask(request, store=False)
        try:
            value = read_reply(reply.text, read, request.data, reply.schema)
        except Unreadable as err:
            if not reply.cached:
                return reply, err
            reply = self.ask(request, store=False, use_cache=False)
            try:
                value = read_reply(reply.text, read, request.data, reply.schema)
            except Unreadable as again:
                return reply, again
        assert self.client is not None  # ask() raised without one
        self.client.store(request, reply)
        return reply, value

    def clamped(self, n: int = 1) -> None:
        """Counts values the reply gave out of range (clamped, or ignored)."""
        if n and self.client is not None:
            self.client.count("clamped_values", n)


def salvaged(reply: Reply, request: ChatRequest, why: Unreadable, salvage: Callable[[dict], T | None] | None) -> T | None:
    """What `salvage` makes of the reply's one object that is not a quote; None without
    `salvage`, for verdicts that disagree, or when the reply has no such object or several."""
    if salvage is None or isinstance(why, Disagreeing):
        return None
    try:
        own = own_objects(reply.text, request.data, reply.schema)
    except Unreadable:
        return None
    return salvage(own[0]) if len(own) == 1 else None
