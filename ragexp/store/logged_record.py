"""What a run folder says of its logging: why it is not in the store, and the command that logs it later."""
from __future__ import annotations

from pathlib import Path

from ragexp.base.redact import scrub_url


def not_logged(where: str, kind: str, error: str, folder: Path) -> str:
    """Why a run folder is not in the store, where its results are, and the command that logs it later."""
    said = scrub_url(error).splitlines()[0][:300] if error.strip() else ""
    return (f"could not log the run to {where} ({kind}: {said}); its results are on disk in {folder}: "
            f"log them later with `python -m ragexp.track {folder}`")
