"""`dry_run=true`: how many requests a run would make and what they would cost, from the prompts
it would send. Prompt tokens are estimated at 4 characters per token; replies are counted at
their `max_tokens` ceiling, so the cost is an upper bound for the output side."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ragexp.llm.client import ChatRequest

CHARS_PER_TOKEN = 4


def prompt_tokens(request: ChatRequest) -> int:
    """A rough token count of the messages (plus a few tokens of framing per message)."""
    return 3 + sum(4 + math.ceil(len(content) / CHARS_PER_TOKEN) for _, content in request.messages)


@dataclass(frozen=True)
class RoleEstimate:
    role: str
    model: str
    base_url: str
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    priced: bool  # the model is in the price table

    @classmethod
    def of(cls, role: str, endpoint, prices, requests: Sequence[ChatRequest]) -> RoleEstimate:
        tokens_in = sum(prompt_tokens(r) for r in requests)
        tokens_out = sum(r.max_tokens for r in requests)
        return cls(role, endpoint.model, endpoint.base_url, len(requests), tokens_in, tokens_out,
                   prices.cost(endpoint.model, tokens_in, tokens_out), prices.known(endpoint.model))


@dataclass(frozen=True)
class Estimate:
    name: str
    questions: int
    roles: tuple[RoleEstimate, ...]
    budget_usd: float | None = None
    notes: tuple[str, ...] = ()  # what the run would ask of others than endpoints (people's labels)

    @property
    def requests(self) -> int:
        return sum(r.requests for r in self.roles)

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.roles)

    def summary(self) -> str:
        lines = [f"ragexp dry run {self.name!r}: no LLM request made; {self.questions} questions would need"]
        for r in self.roles:
            price = "" if r.priced else f" (no price for {r.model!r} in llm.prices: counted as 0)"
            lines.append(f"  {r.role:<10} {r.requests:>6} requests to {r.model} at {r.base_url}: "
                         f"~{r.input_tokens:,} input tokens, <= {r.output_tokens:,} output tokens, "
                         f"<= ${r.cost_usd:.4f}{price}")
        lines.append(f"  total      {self.requests:>6} requests, estimated cost <= ${self.cost_usd:.4f} "
                     f"(input at ~{CHARS_PER_TOKEN} characters per token, output at max_tokens; "
                     "requests already in the cache would cost nothing)")
        if any(r.role == "judge" for r in self.roles):
            lines.append("  (the judge's prompts were sized with each expected answer standing in for the generated one)")
        if self.budget_usd is not None:
            verdict = "within" if self.cost_usd <= self.budget_usd else "above"
            lines.append(f"  budget_usd={self.budget_usd:g}: the estimate is {verdict} it")
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)
