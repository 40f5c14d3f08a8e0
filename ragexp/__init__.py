"""ragexp: declarative, config-driven experiments for evaluating RAG pipelines."""

from ragexp.base import moved

__version__ = "0.1.0"
moved.install()  # modules that moved import under their old names too (a config an older run logged)


def evaluate(*args, **kwargs):
    """`ragexp.evaluate(data, judge=..., overrides=[...], track=...)`: see ragexp.api.evaluate."""
    from ragexp.api import evaluate as run_evaluation

    return run_evaluation(*args, **kwargs)


def __getattr__(name: str):
    if name == "SystemOutput":  # what a system=python function may return (imported when asked for)
        from ragexp.components.systems import SystemOutput

        return SystemOutput
    if name == "Evaluation":
        from ragexp.api import Evaluation

        return Evaluation
    raise AttributeError(f"module 'ragexp' has no attribute {name!r}")


__all__ = ["Evaluation", "SystemOutput", "__version__", "evaluate"]
