"""Batch invariance: each sample's outputs in a batch equal its outputs alone, for any runtime given as a runner."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from skewgate.common.compare import Tolerance, batch_sizes, compare_close
from skewgate.common.verdict import Check

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]  # named inputs → outputs in graph order


def batch_invariance(runtime: str, run: Runner, feeds: dict[str, np.ndarray], names: Sequence[str],
                     tols: Mapping[str, Tolerance], *, dynamic: bool) -> tuple[Check, dict[str, float]]:
    """Batch sizes 1, an odd size and the largest; `dynamic=False` (a static batch) cannot be evaluated: fail.
    Also returns the largest |batched − alone| per output: the runtime's own batch-size variation."""
    name = f"batch_invariance.{runtime}"
    n = int(next(iter(feeds.values())).shape[0])
    if not dynamic:  # the program itself only accepts its traced batch size
        return Check(name, passed=False, detail="not evaluated: the batch dimension is static"), {}
    singles = [run({k: v[i : i + 1] for k, v in feeds.items()}) for i in range(n)]
    worst, where = 0.0, "batch invariant"
    variation = dict.fromkeys(names, 0.0)
    for size in batch_sizes(n):
        batched = run({k: v[:size] for k, v in feeds.items()})
        for out_index, out_name in enumerate(names):
            alone = np.concatenate([s[out_index] for s in singles[:size]])
            closeness = compare_close(batched[out_index], alone, tols[out_name])
            variation[out_name] = max(variation[out_name], closeness.max_abs)
            if closeness.worst_ratio > worst:
                worst = closeness.worst_ratio
                where = f"batch {size}, output {out_name}: {closeness.describe()}"
    allowed = "; ".join(f"{k} rtol {t.rtol:.3g}, atol {t.atol:.3g}" for k, t in tols.items())
    return Check(name, passed=worst <= 1.0, value=worst, limit=1.0,
                 detail=f"sizes {batch_sizes(n)} vs batch-1 outputs ({allowed}); worst: {where}"), variation
