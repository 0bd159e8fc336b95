"""Batch invariance: each sample's outputs in a batch equal its outputs alone, for any runtime given as a runner."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from skewgate.common.compare import ClosenessAlong, Tolerance, batch_sizes, compare_along, compare_close
from skewgate.common.verdict import Check

Runner = Callable[[dict[str, np.ndarray]], list[np.ndarray]]  # named inputs → outputs in graph order


@dataclass(frozen=True)
class BatchRuns:
    """A runtime's outputs for every sample alone and for the first `size` samples batched, per size."""

    alone: list[list[np.ndarray]]  # sample → its outputs, in graph order
    batched: dict[int, list[np.ndarray]]  # batch size → the outputs of the first `size` samples

    def pairs(self, names: Sequence[str]) -> list[tuple[int, str, np.ndarray, np.ndarray]]:
        """(size, output, batched, alone) for every size and output."""
        return [(size, name, outputs[i], np.concatenate([s[i] for s in self.alone[:size]]))
                for size, outputs in self.batched.items() for i, name in enumerate(names)]

    def failing(self, names: Sequence[str], tols: Mapping[str, Tolerance]) -> dict[int, float]:
        """The samples whose batched outputs are out of `tols` from their outputs alone, at any size → their
        worst tolerance ratio."""
        found: dict[int, float] = {}
        for _, name, batched, alone in self.pairs(names):
            if batched.shape == alone.shape and batched.ndim:
                add_failing(found, compare_along(batched, alone, tols[name], axis=0))
        return found


def add_failing(found: dict[int, float], along: ClosenessAlong) -> None:
    """Adds the samples out of tolerance in `along` (compared along the batch axis) to `found`: sample → its
    worst ratio."""
    for index in np.flatnonzero(~along.ok).tolist():
        found[index] = max(found.get(index, 0.0), float(along.worst_ratio[index]))


def batch_runs(run: Runner, feeds: Mapping[str, np.ndarray], *, whole: list[np.ndarray] | None = None) -> BatchRuns:
    """Every sample alone, then the batch sizes of `compare.batch_sizes` above 1 (an odd size, the largest; a
    batch of 1 is the first sample alone). `whole`: the outputs of all of `feeds` in one batch, when the caller
    has them (the largest size is then not run again)."""
    n = int(next(iter(feeds.values())).shape[0])
    alone = [run({k: v[i : i + 1] for k, v in feeds.items()}) for i in range(n)]
    batched = {size: whole if size == n and whole is not None else run({k: v[:size] for k, v in feeds.items()})
               for size in batch_sizes(n) if size > 1}
    return BatchRuns(alone=alone, batched=batched)


def batch_invariance(runtime: str, run: Runner, feeds: dict[str, np.ndarray], names: Sequence[str],
                     tols: Mapping[str, Tolerance], *, dynamic: bool, runs: BatchRuns | None = None,
                     whole: list[np.ndarray] | None = None) -> tuple[Check, dict[str, float]]:
    """An odd batch size and the largest, each against every sample alone (batch 1); `dynamic=False` (a static
    batch) or fewer than 2 samples cannot be evaluated: fail.
    `runs`: the runs already made (`batch_runs`), else `run` makes them (reusing `whole`, the outputs of the
    whole batch). Also returns the largest
    |batched − alone| per output: the runtime's own batch-size variation."""
    name = f"batch_invariance.{runtime}"
    n = int(next(iter(feeds.values())).shape[0])
    if not dynamic:  # the program itself only accepts its traced batch size
        return Check(name, passed=False, detail="not evaluated: the batch dimension is static"), {}
    if n < 2:
        return Check(name, passed=False, detail=f"not evaluated: {n} example input(s); a batch needs at least 2"), {}
    runs = batch_runs(run, feeds, whole=whole) if runs is None else runs
    worst, where = 0.0, "batch invariant"
    variation = dict.fromkeys(names, 0.0)
    for size, out_name, batched, alone in runs.pairs(names):
        closeness = compare_close(batched, alone, tols[out_name])
        variation[out_name] = max(variation[out_name], closeness.max_abs)
        if closeness.worst_ratio > worst:
            worst = closeness.worst_ratio
            where = f"batch {size}, output {out_name}: {closeness.describe()}"
    allowed = "; ".join(f"{k} rtol {t.rtol:.3g}, atol {t.atol:.3g}" for k, t in tols.items())
    return Check(name, passed=worst <= 1.0, value=worst, limit=1.0,
                 detail=f"sizes {sorted(runs.batched)} vs each sample alone ({allowed}); worst: {where}"), variation
