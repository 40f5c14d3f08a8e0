"""What a run's LLM traffic cost: tokens from each reply's `usage`, dollars from the price table,
request / retry / failure counts, and the budget that stops new requests once it is spent."""
from __future__ import annotations

import logging
import threading
from collections import Counter

from typing_extensions import TypedDict

from ragexp.errors import BudgetExhausted
from ragexp.base.settings import NonNegativeFloat

log = logging.getLogger(__name__)


class Price(TypedDict):
    """One model's entry of `llm.prices`: US dollars per million input and output tokens."""

    input: NonNegativeFloat
    output: NonNegativeFloat


class Prices:
    """Model -> {input, output}: US dollars per million tokens. A model not in the table costs 0
    (with one warning), e.g. a local server."""

    def __init__(self, table: dict[str, Price] | None):
        self.table = {str(model): (float(price["input"]), float(price["output"])) for model, price in (table or {}).items()}

    def known(self, model: str) -> bool:
        return model in self.table

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        price_in, price_out = self.table.get(model, (0.0, 0.0))
        return (input_tokens * price_in + output_tokens * price_out) / 1e6


class Usage:
    """Thread-safe tallies of one run, by role ("generator", "judge"): tokens and cost of the
    requests sent (cached replies cost nothing), plus run-wide requests, retries, failures and
    cache hits, and counters a component adds (clamped values, re-asks)."""

    ROLES = ("generator", "judge")

    def __init__(self, budget_usd: NonNegativeFloat | None = None):
        self.budget_usd = budget_usd
        self.spent_usd = 0.0
        self.tokens: Counter = Counter()  # (role, "input"|"output") -> tokens
        self.cost: dict[str, float] = {}  # role -> dollars
        self.counts: Counter = Counter()  # "requests", "retries", "failures", "cache_hits", (role, name)
        self.roles = list(self.ROLES)  # reported even when they spent nothing; others (a reranker) once connected
        self._lock = threading.Lock()

    def add_role(self, role: str) -> None:
        with self._lock:
            if role not in self.roles:
                self.roles.append(role)

    def check_budget(self) -> None:
        with self._lock:
            if self.budget_usd is not None and self.spent_usd >= self.budget_usd:
                raise BudgetExhausted(f"budget: budget_usd={self.budget_usd:g} spent")

    def spend(self, role: str, input_tokens: int, output_tokens: int, cost: float) -> None:
        with self._lock:
            self.tokens[role, "input"] += input_tokens
            self.tokens[role, "output"] += output_tokens
            self.cost[role] = self.cost.get(role, 0.0) + cost
            self.spent_usd += cost

    def count(self, name: str, role: str | None = None, n: int = 1) -> None:
        with self._lock:
            self.counts[(role, name) if role else name] += n

    def stats(self) -> dict[str, float]:
        """The run's aggregates: <role>_input_tokens, <role>_output_tokens, <role>_cost_usd (role
        `embedder` too, once a remote embedder is connected),
        llm_requests, llm_retries, llm_failures, llm_cache_hits, and <role>_<counter>."""
        with self._lock:
            stats: dict[str, float] = {}
            for role in self.roles:
                stats[f"{role}_input_tokens"] = self.tokens[role, "input"]
                stats[f"{role}_output_tokens"] = self.tokens[role, "output"]
                stats[f"{role}_cost_usd"] = round(self.cost.get(role, 0.0), 8)
            for name in ("requests", "retries", "failures", "cache_hits"):
                stats[f"llm_{name}"] = self.counts[name]
            for key, n in sorted((k, v) for k, v in self.counts.items() if isinstance(k, tuple)):
                stats[f"{key[0]}_{key[1]}"] = n
            return stats
