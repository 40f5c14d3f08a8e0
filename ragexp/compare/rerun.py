"""The command that re-runs a logged job from its logged `config.yaml` artifact."""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from ragexp.errors import RagexpError
from ragexp.store.reader import client_for, get_run


def absolute_uri(uri: str) -> str:
    """sqlite:///relative.db -> sqlite:////abs/relative.db, so the command works from any folder."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def python() -> str:
    """`python` when that is this interpreter on PATH, else this interpreter's full path."""
    found = shutil.which("python")
    return "python" if found and Path(found).resolve() == Path(sys.executable).resolve() else sys.executable


def rerun_command(run_id: str, tracking_uri: str | None = None) -> tuple[str, str]:
    """(a comment saying what it re-runs, the shell command)."""
    client, resolved = client_for(tracking_uri)
    run = get_run(client, run_id, resolved)
    if "config.yaml" not in {a.path for a in client.list_artifacts(run_id)}:
        what = "a sweep's parent run" if run.data.tags.get("ragexp.role") == "sweep" else "a run without it"
        raise RagexpError(f"run {run_id} has no config.yaml artifact ({what}); give the run id of one job")
    folder = f"ragexp-rerun-{run_id[:8]}"
    py = shlex.quote(python())
    command = (f"MLFLOW_TRACKING_URI={shlex.quote(absolute_uri(resolved))} {py} -m mlflow artifacts download "
               f"--run-id {run_id} --artifact-path config.yaml --dst-path {folder} >/dev/null && "
               f"{py} -m ragexp --config-path \"$PWD/{folder}\" --config-name config")
    comment = (f"# re-runs {run.info.run_name!r} (run {run_id}) from its logged config.yaml, "
               f"downloaded into ./{folder}")
    return comment, command
