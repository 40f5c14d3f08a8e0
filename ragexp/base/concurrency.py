"""Running one stage over every question, `workers` at a time (threads: the work waits on HTTP)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Callable, Iterable, TypeVar

from ragexp.base.progress import progress

T = TypeVar("T")
R = TypeVar("R")


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], workers: int, desc: str) -> list[R]:
    """`[fn(item) for item in items]`, in order, with up to `workers` calls at once. `fn` handles
    its per-item failures itself; an exception it lets out (a RagexpError: a setting to fix)
    cancels the items not yet started and is raised once the running ones are done. A stop
    (Ctrl-C, SIGTERM: KeyboardInterrupt) cancels the items not yet started and is raised at once:
    the calls under way are not waited for (a command that stops does not wait for them either)."""
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in progress(items, desc=desc, total=len(items))]
    pool = ThreadPoolExecutor(max_workers=min(workers, len(items)), thread_name_prefix="ragexp")
    futures = [pool.submit(fn, item) for item in items]
    try:
        for future in progress(as_completed(futures), desc=desc, total=len(futures)):
            future.result()
    except BaseException as err:
        pool.shutdown(wait=not isinstance(err, KeyboardInterrupt), cancel_futures=True)
        raise
    pool.shutdown()
    return [future.result() for future in futures]


def concurrency(component: object) -> int:
    """How many questions a component takes at once: its `concurrency` (LLM components: their
    endpoint's max_concurrency), else 1 (offline components run in the calling thread)."""
    value = getattr(component, "concurrency", 1)
    return value if isinstance(value, int) and value > 0 else 1

