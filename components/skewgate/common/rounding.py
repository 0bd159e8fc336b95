"""Tolerances grounded in the model's own float32 rounding, not in one-op constants.

A whole network's FP32 output is many roundings away from the exact result: PyTorch FP32 and ONNX Runtime FP32
are each some distance from it, and `torch.testing`'s float32 defaults (rtol 1.3e-6, atol 1e-5, made for one
op) are smaller than that distance on deep or wide models (15× on a 2-layer BERT). The same program run in
float64 on a few samples stands in for the exact result; PyTorch FP32's distance from it, per value, is the
rounding the model has.

The rule: ORT FP32 may be up to `FACTOR` times as far from float64 as PyTorch FP32 is. By the triangle
inequality, |ORT − PyTorch| ≤ (FACTOR + 1) × PyTorch's distance; so a value is judged with
`atol = max(floor.atol, (FACTOR + 1) × distance)` and the floor's `rtol`, the distance being the largest over the
samples the float64 run saw.

Which samples it sees: the first `REFERENCE_SAMPLES`; then, while only samples it has not seen fail, the worst
of those (`to_ground`, up to `MAX_GROUNDED` in all), judging again each time. So a check fails because some
sample is out of tolerance with its own rounding measured (or, past `MAX_GROUNDED`, with that of the
`MAX_GROUNDED` samples that failed worst): one sample whose rounding is 13× the first four's (LR-ASPP's sample
6) is grounded, not failed, and a planted defect fails on the first samples grounded. A float64 run of every
sample would cost about 3× a PyTorch forward (resnet18: float64 convolutions have no fast kernel); a healthy
model pays for the first four only.

The floor is the tolerance used without a reference (dtype defaults for outputs, parity's layer tolerance for
intermediates), so grounding only ever loosens where the model's own rounding says so. A planted defect (a tanh
GELU, one corrupted weight, BatchNorm statistics) moves values by orders of magnitude more than rounding does.

Where the float64 run is impossible (an op with no float64 kernel) or does not measure rounding (PyTorch FP32
and float64 differ by more than `MAX_ROUNDING` of the value's magnitude: random ops such as active dropout, or
an unstable program), the verdict says so and a documented size-aware tolerance is used instead: the floor
scaled by √(number of ops), as independent rounding errors add up like a random walk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from skewgate.common.compare import Tolerance

FACTOR = 4.0  # ORT FP32 may be this many times as far from float64 as PyTorch FP32 is
REFERENCE_SAMPLES = 4  # samples the float64 run always sees: rounding shows on a handful
MAX_GROUNDED = 16  # samples it may see in all: the first few and those that failed without their own grounding
MAX_ROUNDING = 1e-3  # FP32 vs float64 beyond this fraction of the value's magnitude is not rounding


@dataclass(frozen=True)
class Rounding:
    """PyTorch FP32's distance from a float64 run of the same program, per value (max |FP32 − float64| over
    the reference samples, `grounded`: their indices), or why there is none (`fallback`), then judged by size
    (`ops`)."""

    error: Mapping[str, float] = field(default_factory=dict)
    grounded: tuple[int, ...] = ()
    ops: int = 1
    fallback: str | None = None

    @property
    def samples(self) -> int:
        return len(self.grounded)

    def tolerance(self, name: str, floor: Tolerance) -> Tolerance:
        """The tolerance `name` is judged with: grounded in its rounding, never tighter than `floor`."""
        if self.fallback is not None or name not in self.error:
            scale = math.sqrt(max(self.ops, 1))
            return Tolerance(rtol=floor.rtol * scale, atol=floor.atol * scale)
        return Tolerance(rtol=floor.rtol, atol=max(floor.atol, (FACTOR + 1) * self.error[name]))

    def summary(self) -> dict[str, Any]:
        """What the verdict records of the reference: how it was judged, on how many samples."""
        if self.fallback is not None:
            return {"method": "size-aware", "ops": self.ops, "why": self.fallback,
                    "scale": round(math.sqrt(max(self.ops, 1)), 3)}
        return {"method": "float64 reference", "samples": self.samples, "factor": FACTOR,
                # beyond the first few: the samples that failed with the first few's grounding
                "failed_and_grounded": [i for i in self.grounded if i >= REFERENCE_SAMPLES],
                "max_fp32_error": {k: float(f"{v:.3g}") for k, v in self.error.items()}}

    def to_ground(self, failing: Mapping[int, float]) -> list[int]:
        """The samples to ground next, given those that fail with this grounding (sample → its worst tolerance
        ratio): none where one of them was grounded already (it fails with its own rounding measured: the
        failure stands) or there is no float64 run to extend; else the `REFERENCE_SAMPLES` worst, within
        `MAX_GROUNDED` in all."""
        if self.fallback is not None or not failing or set(failing) & set(self.grounded):
            return []
        room = min(REFERENCE_SAMPLES, MAX_GROUNDED - len(self.grounded))
        return sorted(sorted(failing, key=lambda i: -failing[i])[: max(room, 0)])

    def widened(self, more: Rounding) -> Rounding:
        """This grounding and `more` (measured on other samples) together: the larger distance per value; a
        fallback on either side stands."""
        if self.fallback is not None:
            return self
        if more.fallback is not None:
            return more
        error = {name: max(self.error.get(name, 0.0), more.error.get(name, 0.0))
                 for name in {*self.error, *more.error}}
        return Rounding(error=error, grounded=tuple(sorted({*self.grounded, *more.grounded})), ops=self.ops)


def beside(tolerance: Tolerance, variation: float) -> Tolerance:
    """`tolerance`, widened so that a runtime may vary up to `FACTOR` times as much as the reference runtime
    was measured to (PyTorch's own batch-size variation, for ORT's batch invariance)."""
    return Tolerance(rtol=tolerance.rtol, atol=max(tolerance.atol, FACTOR * variation))


def measure(fp32: Mapping[str, np.ndarray], float64: Callable[[], Mapping[str, np.ndarray]], *,
            samples: Sequence[int], ops: int) -> Rounding:
    """PyTorch FP32's values against `float64()`'s on the same samples (`samples`: their indices). Only float values are
    judged; a float64 run that raises, or that differs by more than rounding, gives the size-aware fallback."""
    try:
        wide = float64()
    except Exception as err:  # an op without a float64 kernel, or any other reason the wide run cannot go
        return Rounding(ops=ops, fallback=f"the program does not run in float64 ({type(err).__name__}: "
                                          f"{str(err)[:200]})")
    error: dict[str, float] = {}
    for name, narrow in fp32.items():
        reference = wide.get(name)
        if reference is None or narrow.dtype.kind != "f" or narrow.shape != reference.shape:
            continue
        finite = np.isfinite(narrow) & np.isfinite(reference)
        if not finite.any():
            continue
        distance = float(np.abs(narrow[finite].astype(np.float64) - reference[finite]).max())
        magnitude = float(np.abs(reference[finite]).max())
        if distance > MAX_ROUNDING * max(magnitude, float(np.finfo(np.float32).tiny)):
            return Rounding(ops=ops, fallback=f"PyTorch FP32 and float64 differ by {distance:.3g} on {name!r} "
                                              f"(magnitude {magnitude:.3g}): more than rounding (a random op such "
                                              "as active dropout, or an unstable program)")
        error[name] = distance
    return Rounding(error=error, grounded=tuple(samples), ops=ops)


def first_samples(feeds: Mapping[str, np.ndarray], count: int = REFERENCE_SAMPLES,
                  axes: Mapping[str, int | None] | None = None) -> dict[str, np.ndarray]:
    """The first `count` samples of each input, cut along its batch axis (axis 0 unless `axes` says; None:
    no batch axis, taken whole)."""
    cut = {}
    for name, array in feeds.items():
        axis = 0 if axes is None else axes.get(name, 0)
        cut[name] = array if axis is None else np.ascontiguousarray(
            np.take(array, range(min(count, array.shape[axis])), axis=axis))
    return cut


def take_samples(feeds: Mapping[str, np.ndarray], indices: Sequence[int],
                 axes: Mapping[str, int | None] | None = None) -> dict[str, np.ndarray]:
    """The samples at `indices` of each input, cut along its batch axis (as `first_samples`)."""
    cut = {}
    for name, array in feeds.items():
        axis = 0 if axes is None else axes.get(name, 0)
        cut[name] = array if axis is None else np.ascontiguousarray(np.take(array, list(indices), axis=axis))
    return cut
