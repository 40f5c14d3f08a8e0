"""`python -m ragexp.cache info|clear [--dir DIR]`: the stage cache's size per stage, or empty it
(the cache itself: ragexp.store.cache)."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Sequence

from ragexp.config.cli_settings import parse_args
from ragexp.errors import BAD_INPUT
from ragexp.store.cache import DEFAULT_DIR, MARKER


def folder_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def not_a_cache(root: Path) -> str | None:
    """Why `root` must not be cleared, or None: it is the working folder or one above it, or it
    lacks the stage cache's own mark (a folder ragexp did not make as a cache)."""
    here, folder = Path.cwd().resolve(), root.resolve()
    if folder == here or folder in here.parents:
        return f"--dir {root} is the working folder or one above it, which holds more than a cache"
    if root.exists() and not (root / MARKER).is_file():
        return (f"--dir {root} has no {MARKER}, so it is not a stage cache ragexp made (a cache made before "
                f"ragexp marked its folders lacks it too: delete that folder yourself)")
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ragexp.cache", description="Show the size of ragexp's stage cache, or clear it.")
    parser.add_argument("action", choices=["info", "clear"])
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"cache folder (default {DEFAULT_DIR}, the config's cache.dir)")
    args = parse_args(parser, argv)  # also cache.dir=DIR, as the Hydra commands spell it
    root = Path(args.dir)
    if args.action == "clear":
        refused = not_a_cache(root)
        if refused:
            print(f"python -m ragexp.cache: error: {refused}; nothing was deleted", file=sys.stderr)
            return BAD_INPUT
        if not root.exists():
            print(f"{root}: empty (no cache yet)")
            return 0
        files, size = folder_size(root)
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}: {files} files, {size / 1e6:.1f} MB")
        return 0
    if not root.exists():
        print(f"{root}: empty (no cache yet)")
        return 0
    total_files = total_size = 0
    for entry in sorted(root.iterdir()):
        files, size = folder_size(entry) if entry.is_dir() else (1, entry.stat().st_size)
        total_files, total_size = total_files + files, total_size + size
        print(f"{entry.name:<24} {files:>8} files {size / 1e6:>10.1f} MB")
    print(f"{'total':<24} {total_files:>8} files {total_size / 1e6:>10.1f} MB   ({root.resolve()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
