"""Where a run's code came from: the git commit of ragexp's checkout, tagged on runs."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit(where: Path | None = None) -> str:
    """The commit checked out where ragexp's code is (or at `where`), with `-dirty` appended when
    a tracked file differs from it (as `git describe --dirty` says): a run made with uncommitted
    code does not claim a commit it did not run. "unknown" outside a git checkout."""
    folder = where or Path(__file__).parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True,
                                text=True, timeout=5).stdout.strip()
        if not commit:
            return "unknown"
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder,
                                 capture_output=True, text=True, timeout=10)
        return commit + ("-dirty" if changed.returncode == 0 and changed.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
