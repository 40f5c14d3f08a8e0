"""The corpus-side groups (chunker, embedder, retriever, reranker, generator) belong to ragexp's own
pipeline (`system=pipeline`) alone: another system under test answers by itself, so a corpus-side
setting given with it is refused, on the command line before Hydra composes anything
(`refused_override`) and in the config check (`corpus_side_problems`, for `+chunker=` or a config
file)."""
from __future__ import annotations

from typing import Sequence

CORPUS_GROUPS = ("chunker", "embedder", "retriever", "reranker", "generator")  # composed only under system=pipeline


def corpus_side_problems(cfg) -> list[str]:
    """The corpus-side groups given with a system other than ragexp's own pipeline (by `+chunker=`
    or a config file): one line each, for the config check."""
    system = cfg.get("system")
    target = str(system.get("_target_", "")) if system is not None else ""
    if not target or target.endswith(".PipelineSystem"):
        return []
    return [f"{group}: the system under test ({target.rsplit('.', 1)[-1]}) is not ragexp's pipeline, which alone "
            f"uses a {group}; drop the {group} settings or set system=pipeline" for group in CORPUS_GROUPS if group in cfg]


def refused_override(overrides: Sequence[str]) -> str | None:
    """The first command-line override of a corpus-side group (`chunker=x`, `retriever.top_k=3`)
    when the command also chooses another system (`system=python`, or `dataset=outputs`, which
    reads recorded outputs): one line for the user, before Hydra composes anything; else None."""
    chosen = {}
    for override in overrides:
        key, sep, value = override.lstrip("~+").partition("=")
        if sep and key in ("system", "dataset"):
            chosen[key] = value
    system = chosen.get("system") or ("recorded" if chosen.get("dataset") == "outputs" else "pipeline")
    if system == "pipeline" or "," in system:
        return None
    for override in overrides:
        key = override.partition("=")[0]
        group = key.split(".")[0]  # `embedder@scoring_embedder=...` is another package: not refused
        if group in CORPUS_GROUPS and not override.startswith(("+", "~")):
            return (f"{key}: system={system} does not use ragexp's {group} (the groups {', '.join(CORPUS_GROUPS)} "
                    f"belong to system=pipeline, ragexp's own pipeline); drop {override!r} or set system=pipeline")
    return None
