"""`system=pipeline`: ragexp's own pipeline is the system under test."""
from __future__ import annotations

from ragexp.components.systems.base import System


class PipelineSystem(System):
    """ragexp's own pipeline over the dataset's corpus: its chunker, embedder, retriever and
    generator groups (composed under conf/system/pipeline.yaml) are run by `ragexp.run.pipeline.run`."""

    own = True
    name = "pipeline"
