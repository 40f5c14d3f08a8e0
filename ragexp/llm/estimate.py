"""`dry_run=true`: how many requests a run would make and what they would cost, from the prompts
it would send. Prompt tokens are estimated at 4 characters per token; replies are counted at
their `max_tokens` ceiling, so the cost is an upper bound for the output side."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ragexp.llm.client import ChatRequest

CHARS_PER_TOKEN = 4
# a model ragexp serves, on one CPU thread: tokens per second per 100 MB of model file (SmolLM2-135M
# Q4_1, 98 MB, on one thread of a busy 2-core machine: ~150 prompt and ~30 reply tokens/s); a larger
# file is proportionally slower
PROMPT_TOKENS_PER_S_100MB = 150.0
REPLY_TOKENS_PER_S_100MB = 30.0


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
    priced: bool  # the model is in the price table, or costs nothing (a model ragexp serves)
    seconds: float | None = None  # a model ragexp serves: the time its requests would take (rough)

    @classmethod
    def of(cls, role: str, endpoint, prices, requests: Sequence[ChatRequest]) -> RoleEstimate:
        tokens_in = sum(prompt_tokens(r) for r in requests)
        tokens_out = sum(r.max_tokens for r in requests)
        if getattr(endpoint, "free", False):
            return cls(role, repr(endpoint), "a server ragexp starts", len(requests), tokens_in, tokens_out, 0.0, True,
                       served_seconds(endpoint, tokens_in, tokens_out))
        return cls(role, endpoint.model, endpoint.base_url, len(requests), tokens_in, tokens_out,
                   prices.cost(endpoint.model, tokens_in, tokens_out), prices.known(endpoint.model))


def served_seconds(endpoint, tokens_in: int, tokens_out: int) -> float | None:
    """How long a served model would take for these tokens, one request at a time (its speed per
    100 MB of file, above; replies at their max_tokens ceiling): None when the file cannot be read."""
    from ragexp.llm.endpoint import model_file

    found = model_file(endpoint.model_path)
    if isinstance(found, str):
        return None
    hundreds_mb = max(found.stat().st_size / 1e8, 0.01)
    return hundreds_mb * (tokens_in / PROMPT_TOKENS_PER_S_100MB + tokens_out / REPLY_TOKENS_PER_S_100MB)


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
            if r.seconds is not None:
                lines.append(f"  {'':<10} on one CPU thread: <= ~{r.seconds / 60:.1f} min (prompts at ~"
                             f"{PROMPT_TOKENS_PER_S_100MB:g} and replies at ~{REPLY_TOKENS_PER_S_100MB:g} tokens/s per "
                             "100 MB of model file, replies at max_tokens; a rough bound)")
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
