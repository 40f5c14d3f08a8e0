"""The digest of a folder's content (a model's weights and config files), so that caches key a
model by what it is, not by where it sits: weights copied into the same folder are another model.
Each file's digest is kept for the rest of the process under its path, size and modification time,
so a sweep reads a model's files once."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

_KNOWN: dict[tuple[str, int, int], str] = {}
_LOCK = threading.Lock()


def file_digest(path: Path) -> str:
    """SHA-256 of a file, read once per (path, size, mtime) in this process."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _LOCK:
        known = _KNOWN.get(key)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    with _LOCK:
        _KNOWN[key] = digest.hexdigest()
    return _KNOWN[key]


def folder_digest(folder: str | Path) -> str:
    """A short digest of every file under `folder`: their relative paths and contents."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root)}\0{file_digest(path)}\0".encode())
    return digest.hexdigest()[:16]
