"""Canonical metric names: `ndcg@10` in configs, `ndcg_at_10` as the MLflow key; one mapping."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ragexp.errors import RagexpError

_NAME = re.compile(r"^(?P<base>[a-z][a-z0-9_]*?)(?:(?:@|_at_)(?P<cutoff>\d+))?$")


@dataclass(frozen=True)
class MetricName:
    """A metric family and an optional rank cutoff. `MetricName.parse("ndcg@10")` and
    `MetricName.parse("ndcg_at_10")` are the same metric; `str()` gives the config name and
    `.key` the MLflow key (MLflow keys cannot hold `@`)."""

    base: str
    cutoff: int | None = None

    @classmethod
    def parse(cls, text: str, setting: str = "metric") -> MetricName:
        match = _NAME.match(str(text).strip())
        if not match or (match["cutoff"] is not None and int(match["cutoff"]) < 1):
            raise RagexpError(f"{setting}: {text!r} is not a metric name (write e.g. mrr, ndcg@10 or ndcg_at_10)")
        return cls(match["base"], int(match["cutoff"]) if match["cutoff"] else None)

    def __str__(self) -> str:
        return self.base if self.cutoff is None else f"{self.base}@{self.cutoff}"

    @property
    def key(self) -> str:
        return self.base if self.cutoff is None else f"{self.base}_at_{self.cutoff}"


def metric_key(name: str) -> str:
    """The MLflow key of a metric name: `ndcg@10` -> `ndcg_at_10` (a key maps to itself)."""
    return MetricName.parse(name).key


JOB_TIME = "job_time_s"


def work_key(counter: str) -> str:
    """The MLflow key of a run's work counter (e.g. `embedded_texts` -> `work_embedded_texts`)."""
    return f"work_{counter}"


def timing_key(stage: str) -> str:
    """The MLflow key of a stage's wall time (e.g. `indexing` -> `time_indexing_s`)."""
    return f"time_{stage}_s"


def is_bookkeeping(key: str) -> bool:
    """A run's account of its own work and time (`work_*`, `time_*_s`, `job_time_s`), not a score."""
    return key == JOB_TIME or key.startswith("work_") or (key.startswith("time_") and key.endswith("_s"))


def higher_is_worse(metric: str) -> bool:
    """Whether a higher value of `metric` is a worse answer (the hallucination metrics)."""
    return "hallucination" in metric
