"""What a generator or judge that sends chat requests has in common."""
from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from ragexp.errors import QuestionFailed
from ragexp.llm.client import ChatClient, ChatRequest, Reply
from ragexp.llm.endpoint import Endpoint
from ragexp.llm.prompts import Template
from ragexp.llm.replies import Unreadable, read_reply
from ragexp.types import Answer, Hit, Question

T = TypeVar("T")


class UsesLLM:
    """A component with an `endpoint`. The run's `LLMSession.connect` gives it its `client`
    before any work (so a missing key or an unreachable endpoint stops the run first);
    `planned_requests` lists what it would send, for `dry_run=true`."""

    endpoint: Endpoint
    client: ChatClient | None = None
    counters: tuple[str, ...] = ()  # the counters it reports (as <role>_<name>), zero when nothing happened

    @property
    def concurrency(self) -> int:
        """How many questions the pipeline hands it at once."""
        return self.endpoint.max_concurrency

    def planned_requests(self, question: Question, hits: Sequence[Hit], answer: Answer) -> list[ChatRequest]:
        raise NotImplementedError

    def ask(self, request: ChatRequest) -> Reply:
        if self.client is None:
            raise RuntimeError(f"{type(self).__name__} is not connected: LLMSession.connect gives it a client")
        return self.client.complete(request)


class AsksForJSON(UsesLLM):
    """Asks for a JSON reply; a reply that cannot be read is asked once more with the problem
    stated (`reask_prompt`, field {problem}), then the question fails with the reason."""

    counters = ("reasks", "unreadable_replies", "clamped_values")
    reask_prompt: Template  # with the field {problem}, set by the subclass

    def ask_json(self, request: ChatRequest, read: Callable[[dict], T]) -> T:
        reply = self.ask(request)
        assert self.client is not None  # ask() has checked
        try:
            return read_reply(reply.text, read)
        except Unreadable as first:
            self.client.count("reasks")
            again = self.ask(request.followed_by(reply.text, self.reask_prompt.render(problem=str(first))))
            try:
                return read_reply(again.text, read)
            except Unreadable as second:
                self.client.count("unreadable_replies")
                raise QuestionFailed(f"{self.client.role}: unreadable reply after a re-ask: {second}") from None

    def clamped(self, n: int = 1) -> None:
        """Counts values the reply gave out of range (clamped, or ignored)."""
        if n and self.client is not None:
            self.client.count("clamped_values", n)
