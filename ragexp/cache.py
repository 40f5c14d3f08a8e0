"""`python -m ragexp.cache info|clear [--dir DIR]`: the stage cache's size per stage, or empty it
(the cache itself: ragexp.store.cache)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from ragexp.config.cli_settings import parse_args
from ragexp.errors import BAD_INPUT
from ragexp.store.cache import DEFAULT_DIR
from ragexp.store.cache_folder import TAG, clear, is_ragexp_tag, named


def folder_size(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def not_a_cache(root: Path) -> str | None:
    """Why `root` must not be cleared, or None: it is the working folder or one above it, or it
    lacks ragexp's own CACHEDIR.TAG (a folder ragexp did not make as a cache, another tool's cache)."""
    here, folder = Path.cwd().resolve(), root.resolve()
    if folder == here or folder in here.parents:
        return f"--dir {root} is the working folder or one above it, which holds more than a cache"
    if root.exists() and not is_ragexp_tag(root):
        if (root / TAG).exists():
            return f"--dir {root} carries another tool's {TAG}, so it is not a stage cache ragexp made"
        return (f"--dir {root} has no {TAG}, so it is not a stage cache ragexp made (a cache made before "
                f"ragexp tagged its folders lacks it too: a run with cache.dir={root} tags it)")
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
        done = clear(root)
        print(f"removed {root}: {done.files} files, {done.bytes / 1e6:.1f} MB")
        if done.left:
            print(f"left {len(done.left)} files ragexp did not write in {root}: {named(done.left, root)}")
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
