"""Who writes a run folder, and how its run ended: a run claims its folder (its owner record:
host, pid, start time), releases it when it ends with a message, and a folder whose run ended
without its results.json (killed, a full disk) is found and named (`ended_without_results`,
`name_incomplete`)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ragexp.base.processes import alive, this_process
from ragexp.errors import RagexpError
from ragexp.store.run_folder import RESULTS


class FolderIncomplete(RagexpError):
    """The run folder could not be written as the run ended (a full disk, a file size limit): it is
    left without results.json, nothing of it is logged, and the next command in the same outputs
    folder and `python -m ragexp.track FOLDER` say so (`ended_without_results`). Commands exit
    RUN_FAILED (4) on it."""


OWNER = ".ragexp-owner"  # in a run folder: the process that writes it (host, pid, start time)
INCOMPLETE = "incomplete.json"  # the owner record of a run that ended without results.json, once a command named it


def claim(folder: Path) -> None:
    """Makes `folder` this process's run folder: its owner file is created (atomically) unless it
    names another process that still runs, in which case nothing is written and RagexpError says
    so (two runs writing one folder would log each other's results). A folder a finished or killed
    run left is taken over: its results.json, which is not this run's, is removed. A folder that
    cannot be made or written is a RagexpError naming it."""
    try:
        taken = own(folder)
    except OSError as err:
        raise RagexpError(f"hydra.run.dir: cannot write the run folder {folder} ({reason(err)}); give a folder that "
                          "can be written (hydra.run.dir=..., or output_dir= in ragexp.evaluate)") from None
    if not taken:
        raise RagexpError(f"hydra.run.dir: could not claim the run folder {folder}; give this run its own folder")


def own(folder: Path) -> bool:
    """`claim`'s work: True once the owner file is this process's; OSError when the folder cannot be written."""
    folder.mkdir(parents=True, exist_ok=True)
    path, me = folder / OWNER, this_process()
    for _ in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = owner_of(path)
            if holder is not None and {k: holder.get(k) for k in me} == me:
                fresh(folder)
                return True  # already ours: a second job of this process in the same folder
            if (holder is None and time.time() - path.stat().st_mtime < 10) or (holder is not None and alive(holder)):
                who = f"process {holder['pid']} on {holder['host']}" if holder else "a run starting now"
                raise RagexpError(f"hydra.run.dir: the run folder {folder} is in use by another run ({who}); give "
                                  "each run its own folder (the default, outputs/<date>/<time to the microsecond>, is one)") from None
            path.unlink(missing_ok=True)  # left by a run that ended or was killed
            continue
        with os.fdopen(fd, "w") as out:
            json.dump(me, out)
        fresh(folder)
        return True
    return False


def fresh(folder: Path) -> None:
    """A folder given again (hydra.run.dir=run) loses what said an earlier run's end: its
    results.json (the run now starting writes its own, or none) and incomplete.json."""
    for stale in (RESULTS, INCOMPLETE):
        (folder / stale).unlink(missing_ok=True)


def reason(err: OSError) -> str:
    """An OSError as a short reason: `No space left on device`, with the file when it names one."""
    return f"{err.strerror or type(err).__name__}" + (f": {err.filename}" if err.filename else "")


def release(folder: Path) -> None:
    """The owner file removed, when it is this process's: the run ended with a message that says
    why (a setting to fix, code that stopped it), so the folder is not one to name later."""
    path = Path(folder) / OWNER
    holder = owner_of(path)
    if holder is not None and {k: holder.get(k) for k in this_process()} == this_process():
        path.unlink(missing_ok=True)


def owner_of(path: Path) -> dict | None:
    """The owner a run folder's owner file names, or None while it is being written or unreadable."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def ended_without_results(folder: Path) -> dict | None:
    """The process that wrote `folder` and ended without its results.json, said nothing of it
    (os._exit past the guard, a kill, a crash) or could not write it (a full disk): its owner
    record (a process gone), or the record a command that named it kept (incomplete.json). None for
    a complete folder, one being written, and one whose run ended with a message."""
    folder = Path(folder)
    if (folder / RESULTS).exists():
        return None
    named = owner_of(folder / INCOMPLETE)
    if named is not None:
        return named
    holder = owner_of(folder / OWNER)
    return holder if holder is not None and not alive(holder) else None


def incomplete_message(folder: Path, record: dict) -> str:
    """What is said of a folder `ended_without_results` returns a record for."""
    return (f"{folder} is incomplete: the run that wrote it (process {record.get('pid')} on {record.get('host')}) ended "
            "without its results.json (os._exit, a kill, a crash or a full disk); nothing of it was logged. Run the "
            "command again: the stage cache keeps the work it finished")


def name_incomplete(root: Path, depth: int) -> list[str]:
    """The run folders `depth` levels under `root` (0: `root` itself) whose run ended without
    results.json and that no command named yet, each as `incomplete_message`; each is marked named
    (its owner file becomes incomplete.json: said once, and `python -m ragexp.track` still says it)."""
    said = []
    for owner in sorted(Path(root).glob("/".join(["*"] * depth + [OWNER]))):
        folder = owner.parent
        record = ended_without_results(folder)
        if record is None or (folder / INCOMPLETE).exists():
            continue
        said.append(incomplete_message(folder, record))
        try:
            owner.replace(folder / INCOMPLETE)
        except OSError:
            pass  # said again by the next command
    return said
