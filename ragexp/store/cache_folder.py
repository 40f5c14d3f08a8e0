"""Which folder is a ragexp cache, and which of its files ragexp wrote.

A cache folder carries ragexp's own `CACHEDIR.TAG` (the Cache Directory Tagging convention, so backup
tools skip it; its text says it is ragexp's). `claim(folder)` tags a new or empty folder, or one that
holds only ragexp's entries (a cache made before ragexp tagged its folders), and refuses any other:
a folder holding a user's files, or another tool's tag, is never made a cache, since
`python -m ragexp.cache clear` empties a cache. `clear(folder)` deletes only ragexp's entries there
and returns the files it left.

ragexp's entries: the stage folders (`<stage>/<key[:2]>/<key>.json`), `embeddings.sqlite` and its
lock, WAL and journal files, `llm/responses.sqlite` and its own, `models/<kind>-<digest>/` (exported
models) and the temporary files of an interrupted write (`.tmp-*`)."""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ragexp.errors import RagexpError

TAG = "CACHEDIR.TAG"
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# ragexp's stage cache: `python -m ragexp.cache clear --dir THIS_FOLDER` empties it.\n")
OWNER_LINE = "# ragexp's stage cache"  # what tells ragexp's tag from another tool's

SQLITE_SIDES = ("", "-lock", "-wal", "-shm", "-journal")
TOP_FILES = {f"embeddings.sqlite{side}" for side in SQLITE_SIDES}
LLM_FILES = {f"responses.sqlite{side}" for side in SQLITE_SIDES}
STAGE = re.compile(r"[a-z][a-z0-9_]*")
SHARD = re.compile(r"[0-9a-f]{2}")
ENTRY = re.compile(r"[0-9a-f]{16,128}\.json")
MODEL = re.compile(r"[a-z][a-z0-9_-]*-[0-9a-f]{8,64}")
NAMED = 10  # files named in a message; the rest are counted


def is_ragexp_tag(folder: Path) -> bool:
    """Whether `folder` carries ragexp's own CACHEDIR.TAG (not another tool's, not none)."""
    try:
        with open(folder / TAG, "rb") as file:
            head = file.read(4096)
    except OSError:
        return False
    return OWNER_LINE.encode() in head


def is_ragexp_file(parts: tuple[str, ...]) -> bool:
    """Whether the file at `parts` (its path inside the cache folder, split) is one ragexp writes."""
    name = parts[-1]
    if name.startswith(".tmp-"):  # an interrupted atomic write, or the write probe
        return True
    if len(parts) == 1:
        return name in TOP_FILES
    if parts[0] == "llm":
        return len(parts) == 2 and name in LLM_FILES
    if parts[0] == "models":
        return len(parts) >= 3 and bool(MODEL.fullmatch(parts[1]))
    return len(parts) == 3 and bool(STAGE.fullmatch(parts[0]) and SHARD.fullmatch(parts[1]) and ENTRY.fullmatch(name))


def is_ragexp_folder(parts: tuple[str, ...]) -> bool:
    """Whether the folder at `parts` (inside the cache folder) is one ragexp makes."""
    if parts[0] == "llm":
        return len(parts) == 1
    if parts[0] == "models":
        return len(parts) == 1 or bool(MODEL.fullmatch(parts[1]))
    return len(parts) <= 2 and bool(STAGE.fullmatch(parts[0])) and (len(parts) == 1 or bool(SHARD.fullmatch(parts[1])))


def files_under(root: Path):
    """(path, its parts inside `root`) of every file under `root` (symbolic links not followed)."""
    for top, dirs, files in os.walk(root):
        dirs.sort()
        inside = Path(top).relative_to(root).parts
        for name in sorted(files):
            yield Path(top, name), (*inside, name)


def foreign_files(root: Path) -> list[Path]:
    """The files under `root` that ragexp did not write (another tool's tag included)."""
    found = []
    for path, parts in files_under(root):
        if parts == (TAG,):
            if not is_ragexp_tag(root):
                found.append(path)
        elif not is_ragexp_file(parts):
            found.append(path)
    return found


def named(paths: list[Path], root: Path) -> str:
    shown = ", ".join(str(p.relative_to(root)) for p in paths[:NAMED])
    return shown + (f" and {len(paths) - NAMED} more" if len(paths) > NAMED else "")


def claim(root: Path) -> None:
    """Makes `root` a ragexp cache (creating it and writing ragexp's tag, atomically) unless it is
    one already. A folder holding files ragexp did not write, or another tool's tag, is refused
    with a RagexpError naming them: `clear` would then have to tell a user's files from the cache's."""
    root.mkdir(parents=True, exist_ok=True)
    if is_ragexp_tag(root):
        return
    foreign = foreign_files(root)
    if foreign:
        other_tag = (root / TAG).exists()
        raise RagexpError(
            f"cache.dir={root}: the folder holds files ragexp did not write ({named(foreign, root)})"
            + (", and its CACHEDIR.TAG is another tool's" if other_tag else "")
            + ", so it cannot be the stage cache (clearing the cache would delete them): "
            "set cache.dir to a new or empty folder")
    with tempfile.NamedTemporaryFile("w", dir=root, prefix=".tmp-tag-", delete=False, encoding="utf-8") as file:
        written = Path(file.name)
    try:
        written.write_text(TAG_TEXT, encoding="utf-8")
        os.replace(written, root / TAG)  # atomic: a process starting beside this one reads the whole tag or none
    finally:
        written.unlink(missing_ok=True)


@dataclass
class Cleared:
    files: int = 0
    bytes: int = 0
    left: list[Path] = field(default_factory=list)  # files ragexp did not write, left where they are


def clear(root: Path) -> Cleared:
    """Deletes ragexp's entries under `root` (a folder carrying ragexp's tag: the caller checks),
    then the folders they leave empty; the tag and the folder go too when nothing else is left."""
    done = Cleared()
    for path, parts in list(files_under(root)):
        if parts == (TAG,):
            continue
        if not is_ragexp_file(parts):
            done.left.append(path)
            continue
        try:
            size = path.lstat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        done.files, done.bytes = done.files + 1, done.bytes + size
    for top, _dirs, _files in sorted(os.walk(root), key=lambda walked: -len(Path(walked[0]).parts)):
        parts = Path(top).relative_to(root).parts
        if parts and is_ragexp_folder(parts):
            try:
                os.rmdir(top)  # only when empty: a folder still holding a user's file stays
            except OSError:
                pass
    if not done.left and [p.name for p in root.iterdir()] == [TAG]:
        (root / TAG).unlink()
        done.files += 1
        root.rmdir()
    return done
