"""Progress bars on long work when stderr is a terminal; silent otherwise."""
from __future__ import annotations

import sys
from typing import Iterable, TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], desc: str, total: int | None = None) -> Iterable[T]:
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, total=total, disable=not sys.stderr.isatty(), leave=False)
