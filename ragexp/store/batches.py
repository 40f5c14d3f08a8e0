"""Batching: a run's params and metrics in the fewest `log_batch` calls, its files staged for one
`log_artifacts` call."""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def batches(params: list, metrics: list, most: int = 1000, most_params: int = 100):
    """Params and metrics in the fewest `log_batch` calls MLflow takes (at most 100 params and 1000
    entries a call)."""
    while params or metrics:
        these_params, params = params[:most_params], params[most_params:]
        room = most - len(these_params)
        these_metrics, metrics = metrics[:room], metrics[room:]
        yield these_params, these_metrics


@contextmanager
def staged(files: list[Path]):
    """A temporary folder holding `files` side by side (linked where the disk allows, else copied),
    for one `log_artifacts` call instead of one call a file."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ragexp-artifacts-") as tmp:
        for file in files:
            try:
                os.link(file, Path(tmp) / file.name)
            except OSError:
                shutil.copy2(file, Path(tmp) / file.name)
        yield Path(tmp)
