"""Per-feature work spread over the machine's cores. numpy's sorts, argsorts and element-wise loops release the
GIL, so threads run features side by side: on two cores the 100k × 512 gate's exact KS pass and its sorts take
about half their one-thread time (benchmarks/drift_bench.py --only wide). Results come back in the items'
order, so what a gate computes does not depend on how many cores it ran on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")
MAX_WORKERS = 4  # past a few threads the features' sorts contend for memory bandwidth, not cores


def workers() -> int:
    """Threads to use: the cores this process may run on, at most `MAX_WORKERS`."""
    return max(1, min(MAX_WORKERS, len(os.sched_getaffinity(0))))


def map_features(work: Callable[[Item], Result], items: Iterable[Item]) -> list[Result]:
    """`[work(item) for item in items]`, on `workers()` threads; an exception in any item is raised here."""
    items = list(items)
    count = min(workers(), len(items))
    if count < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="skewgate-drift") as pool:
        return list(pool.map(work, items))


def in_parts(work: Callable[[slice], None], length: int) -> None:
    """`work` on `workers()` contiguous slices of `range(length)` side by side (in-place work on rows of one
    array: each thread sorts its own rows)."""
    count = min(workers(), length)
    bounds = [length * k // max(count, 1) for k in range(count + 1)]
    map_features(work, [slice(a, b) for a, b in pairwise(bounds) if b > a])
