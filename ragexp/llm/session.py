"""The run-wide side of LLM use (the `llm` config node): one cache, one price table, one budget
and one tally for every LLM component of a run."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

from ragexp.llm.cache import ResponseCache
from ragexp.llm.client import ChatClient
from ragexp.llm.component import UsesLLM
from ragexp.llm.estimate import Estimate, RoleEstimate
from ragexp.llm.usage import Price, Prices, Usage
from ragexp.types import Answer, Hit, Question
from ragexp.base.settings import NonNegativeFloat

log = logging.getLogger(__name__)
FREE = Prices(None)


class LLMSession:
    """`cache_dir` (relative to the working directory; null: no cache) holds every request and
    reply; `prices` is the price table (model -> input/output dollars per million tokens);
    `budget_usd` stops new requests once that much is spent; `dry_run` makes no request at all
    (`estimate` says what the run would send)."""

    def __init__(self, cache_dir: str | None, prices: dict[str, Price] | None,
                 budget_usd: NonNegativeFloat | None, dry_run: bool, cache_enabled: bool):
        self.cache_dir, self.dry_run = (cache_dir if cache_enabled else None), bool(dry_run)
        self.prices = Prices(prices)
        self.usage = Usage(budget_usd)
        self.components: dict[str, UsesLLM] = {}
        self.embedders: list = []  # remote embedders (embedder=openai): their traffic is the run's too
        self._cache: ResponseCache | None = None

    def connect(self, **components) -> None:
        """Gives each LLM component (keyword = its role: generator=..., judge=...) a client, after
        checking its API key and that its endpoint can be reached (its settings were checked with the
        config, ragexp.validation); other components (and an LLM component that will send nothing:
        a rubric of deterministic criteria only) are left alone. In a dry run no client is made."""
        for role, component in components.items():
            if not isinstance(component, UsesLLM) or not component.sends_requests:
                continue
            setting, endpoint = f"{component.config_key or role}.endpoint", component.endpoint
            self.components[role] = component
            self.usage.add_role(role)
            if self.dry_run:
                continue
            key = endpoint.api_key(setting)
            endpoint.probe(setting)
            if not endpoint.free and not self.prices.known(endpoint.model):
                log.warning("no price for model %r in llm.prices: its cost is counted as 0", endpoint.model)
            prices = FREE if endpoint.free else self.prices  # a model ragexp serves costs nothing
            component.client = ChatClient(endpoint, role, key, self.usage, prices, self.cache(), setting)
            for name in component.counters:
                self.usage.count(name, role, 0)

    def connect_embedders(self, embedders) -> None:
        """The run's embedders that send requests (those with `count_usage`, e.g. embedder=openai) count
        their requests, tokens and cost in this session's usage, priced from its price table."""
        for embedder in embedders:
            if hasattr(embedder, "count_usage") and not self.dry_run:
                embedder.count_usage(self.usage, self.prices)
                self.embedders.append(embedder)

    def cache(self) -> ResponseCache | None:
        if self.cache_dir and self._cache is None:
            self._cache = ResponseCache(Path(self.cache_dir))
            self._cache.open()  # not on the first request's path
        return self._cache

    def stats(self) -> dict[str, float]:
        """Tokens, cost and request counts of the run: only when some component uses an LLM."""
        return self.usage.stats() if self.components or self.embedders else {}

    def estimate(self, name: str, questions: Sequence[Question], hits: Sequence[Sequence[Hit]],
                 role_hits: dict[str, Sequence[Sequence[Hit]]] | None = None,
                 role_questions: dict[str, set[str]] | None = None) -> Estimate:
        """What a run would send: each component's requests for each question, the expected answer
        (empty for a question without one) standing in for the generated one. A role of `role_hits`
        (the reranker) is given those hits instead of `hits`; a role of `role_questions` (a
        cascade's expensive judge) asks only for those question ids."""
        roles = []
        for role, component in self.components.items():
            todo = [(q, tuple(h)) for q, h in zip(questions, (role_hits or {}).get(role, hits))
                    if role not in (role_questions or {}) or q.qid in (role_questions or {})[role]]
            roles.append(RoleEstimate.of(role, component.endpoint, self.prices,
                                         [r for q, h in todo for r in component.planned_requests(q, h, Answer(q.expected))]))
        return Estimate(name, len(questions), tuple(roles), self.usage.budget_usd)

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
