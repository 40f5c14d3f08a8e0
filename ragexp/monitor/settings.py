"""`monitor:` of conf/monitor.yaml, whose defaults are written there (once): the types and ranges
the config check holds them to before any record is read."""
from __future__ import annotations

from typing import Any, Literal, Mapping

from ragexp.base.settings import NonEmptyStr, NonNegativeFloat, NonNegativeInt, OnError, PositiveFloat, PositiveInt


class MonitorSettings:
    """Where the records come from (`source`: a log file `input` in `format` with `columns`, an
    MLflow experiment's `traces`, or OpenTelemetry spans in `input` read as `otlp` says), how they are summarised (`window`, `judge_sample` judged per
    window with `seed`, `exact_percentiles_max`), compared (`baseline`; `ab`: variants against a
    control, ragexp.monitor.ab) and told (`webhook_url`)."""

    def __init__(self, source: Literal["file", "mlflow", "otlp"], input: str | None, traces: Mapping[str, Any],
                 format: Literal["auto", "jsonl", "csv", "tsv"], columns: Mapping[str, str | None],
                 feedback_satisfied_from: float | None, model: NonEmptyStr, window: NonEmptyStr,
                 judge_sample: NonNegativeInt, seed: int, on_error: OnError, max_field_bytes: PositiveInt,
                 exact_percentiles_max: PositiveInt,
                 baseline: str | None, ab: Mapping[str, Any], name: str | None, webhook_url: str | None, webhook_retries: NonNegativeInt,
                 webhook_backoff_s: NonNegativeFloat, webhook_timeout_s: PositiveFloat,
                 otlp: Mapping[str, Any]):
        self.source, self.input = source, input

    @classmethod
    def constraints(cls, source: str, input: str | None, ab: Mapping[str, Any] | None = None, **_) -> list[str]:
        from ragexp.errors import RagexpError
        from ragexp.monitor.ab import ABSettings

        found = []
        if source == "file" and not input:
            found.append("input: not set; set monitor.input=/path/to/log.jsonl (JSONL or CSV)")
        if source == "otlp" and not input:
            found.append("input: not set; set monitor.input=/path/to/spans.jsonl (OTLP/JSON, OTLP/protobuf or "
                         "Phoenix's spans table)")
        try:
            ABSettings.of(dict(ab) if ab else None)
        except RagexpError as err:
            found.append(str(err).removeprefix("monitor."))
        return found
