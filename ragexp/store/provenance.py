"""Where a run's code came from: the git commit of ragexp's checkout, tagged on runs."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
