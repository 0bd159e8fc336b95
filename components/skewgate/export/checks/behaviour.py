"""Checks on how the exported model behaves at run time, beyond matching PyTorch's outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.batching import Runner
from skewgate.common.io import onnx_input_specs
from skewgate.common.tensor_stats import sha256_array
from skewgate.common.verdict import Check

if TYPE_CHECKING:
    import onnx


def finite_inputs(feeds: Mapping[str, np.ndarray]) -> Check:
    bad = {n: int((~np.isfinite(a)).sum()) for n, a in feeds.items() if a.dtype.kind in "fc"}
    bad = {n: c for n, c in bad.items() if c}
    return Check("inputs_finite", passed=not bad, value=sum(bad.values()), limit=0,
                 detail=f"NaN/Inf values in example inputs: {bad}" if bad else "all example inputs are finite")


def dynamic_batch(model: onnx.ModelProto) -> Check:
    dynamic = all(spec.shape and spec.shape[0] is None for spec in onnx_input_specs(model))
    return Check("dynamic_batch", passed=dynamic, value=float(dynamic), limit=1.0,
                 detail="batch dimension of every input is symbolic" if dynamic else
                 "the batch dimension is static: export the program with dynamic_shapes")


def determinism(runtime: str, run: Runner, feeds: dict[str, np.ndarray], *,
                first: list[np.ndarray] | None = None) -> Check:
    """`feeds` run twice give bit-identical outputs; `first`: the outputs of a run already made (one more run)."""
    first_hashes = [sha256_array(o) for o in (run(feeds) if first is None else first)]
    second = [sha256_array(o) for o in run(feeds)]
    same = first_hashes == second
    return Check(f"determinism.{runtime}", passed=same, value=float(same), limit=1.0,
                 detail="two runs bit-identical" if same else
                 "two runs on the same inputs differ (active dropout or another random op?)")


def hash_chain(loaded: Mapping[str, str], torch_fed: Mapping[str, str], ort_fed: Mapping[str, str]) -> Check:
    changed = [n for n in loaded if not (loaded[n] == torch_fed.get(n) == ort_fed.get(n))]
    return Check("input_hash_chain", passed=not changed, value=len(changed), limit=0,
                 detail=f"inputs changed between loading and feeding: {changed}" if changed else
                 "PyTorch and ONNX Runtime were fed the exact tensors that were loaded")
