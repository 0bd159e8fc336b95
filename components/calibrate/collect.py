"""Streaming activation statistics for calibration, in bounded memory and independent of sample order.

Pass 1 records, per tensor, each sample's min and max (one pair of floats per sample: the calibration data is
larger), the global extremes, and per-channel |max| for the tensors that equalization may rescale. From those,
`robust_bounds` drops the few samples whose extremes stand far above the rest, so a corrupted sample or a rare
spike never sets the histogram range. Pass 2 fills a fixed-range histogram per tensor over those bounds (values
beyond are counted, not binned) and the central moments for kurtosis. Histogram counts are integers and the
bounds are functions of the set of per-sample extremes, so the result is the same for any order or batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from skewgate.parity.layers import with_intermediates

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)
BINS = 2048
OUTLIER_SAMPLE_FACTOR = 4.0  # a sample whose |max| is this many times the median sample's is an outlier …
MAX_OUTLIER_SAMPLES = 0.02  # … and at most this fraction of the samples (at least one) may be set aside
Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class FirstPass:
    """Per tensor: every sample's extremes, the global extremes, and per-channel |max| when asked for."""

    sample_low: np.ndarray
    sample_high: np.ndarray
    channel_absmax: np.ndarray | None = None
    lowest: float = np.inf
    highest: float = -np.inf
    total: float = 0.0
    count: int = 0


@dataclass
class Histogram:
    """A fixed-range histogram with the values below and above its range counted apart, plus moments."""

    low: float
    high: float
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    below: int = 0
    above: int = 0
    mean: float = 0.0
    m2: float = 0.0  # Σ(x − mean)²
    m4: float = 0.0  # Σ(x − mean)⁴

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.below + self.above

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.low, self.high, BINS + 1)

    @property
    def kurtosis(self) -> float:
        n = self.total
        return float(n * self.m4 / self.m2**2) if n and self.m2 > 0 else 0.0

    def add(self, values: np.ndarray) -> None:
        flat = values.ravel().astype(np.float64)
        below, above = flat < self.low, flat > self.high
        self.below += int(below.sum())
        self.above += int(above.sum())
        inside = flat[~(below | above)]
        index = ((inside - self.low) * (BINS / (self.high - self.low))).astype(np.int64)
        self.counts += np.bincount(np.minimum(index, BINS - 1), minlength=BINS)
        centred = flat - self.mean
        squared = centred * centred
        self.m2 += float(squared.sum())
        self.m4 += float((squared * squared).sum())


class ActivationRunner:
    """Runs an ONNX model with the chosen tensors exposed as outputs; graph inputs come from the feeds."""

    def __init__(self, model: onnx.ModelProto, names: Collection[str]) -> None:
        import onnxruntime as ort

        inputs = {i.name for i in model.graph.input}
        self.inner = [n for n in names if n not in inputs]
        options = ort.SessionOptions()
        options.enable_cpu_mem_arena = False  # every exposed tensor is a fresh allocation per run: no arena peak
        options.log_severity_level = 3
        self.session = ort.InferenceSession(with_intermediates(model, self.inner).SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
        self.exposed = [o.name for o in self.session.get_outputs()]
        self.names = list(names)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        produced = dict(zip(self.exposed, self.session.run(None, feeds), strict=True))
        return {n: feeds[n] if n in feeds else produced[n] for n in self.names if n in feeds or n in produced}


def batches(data: Mapping[str, np.ndarray], batch_size: int, *, stage: str) -> Iterator[tuple[int, dict]]:
    """(first sample index, feeds) per batch, with progress on stderr every quarter."""
    n = len(next(iter(data.values())))
    step = max(1, n // 4)
    for start in range(0, n, batch_size):
        yield start, {k: v[start : start + batch_size] for k, v in data.items()}
        done = min(start + batch_size, n)
        if done // step != start // step or done == n:
            log.info("%s: %d/%d samples", stage, done, n)


def first_pass(run: Runner, data: Mapping[str, np.ndarray], names: list[str], *, batch_size: int,
               channels: Collection[str] = (), stage: str = "calibration pass 1/2") -> dict[str, FirstPass]:
    n = len(next(iter(data.values())))
    stats = {name: FirstPass(np.full(n, np.inf), np.full(n, -np.inf)) for name in names}
    for start, feeds in batches(data, batch_size, stage=stage):
        for name, value in run(feeds).items():
            s, rows = stats[name], len(next(iter(feeds.values())))
            low, high = _per_sample(value, rows, np.min), _per_sample(value, rows, np.max)
            s.sample_low[start : start + rows] = low
            s.sample_high[start : start + rows] = high
            s.lowest, s.highest = min(s.lowest, float(low.min())), max(s.highest, float(high.max()))
            s.total += float(value.sum(dtype=np.float64))
            s.count += value.size
            if name in channels and value.ndim >= 2:
                per_channel = np.abs(np.moveaxis(value, 1, 0).reshape(value.shape[1], -1)).max(axis=1)
                s.channel_absmax = per_channel if s.channel_absmax is None else np.maximum(s.channel_absmax,
                                                                                          per_channel)
    return stats


def _per_sample(value: np.ndarray, rows: int, reduce: Callable[..., np.ndarray]) -> np.ndarray:
    if value.ndim and value.shape[0] == rows:
        return np.asarray(reduce(value.reshape(rows, -1), axis=1), dtype=np.float64)
    # a tensor without the batch axis first: its extreme is charged to every sample of the batch
    return np.full(rows, float(reduce(value)) if value.size else np.nan)


@dataclass(frozen=True)
class Bounds:
    low: float
    high: float
    set_aside: tuple[int, ...]  # sample indices whose extremes were left out


def robust_bounds(stats: FirstPass) -> Bounds:
    """The range over the samples that remain once outlier samples are set aside (see module docstring)."""
    extremes = np.maximum(np.abs(stats.sample_low), np.abs(stats.sample_high))
    finite = np.isfinite(extremes)
    median = float(np.median(extremes[finite])) if finite.any() else 0.0
    cap = max(1, int(MAX_OUTLIER_SAMPLES * extremes.size))
    order = np.argsort(-np.where(finite, extremes, np.inf), kind="stable")
    aside = [int(i) for i in order[:cap] if not finite[i] or extremes[i] > OUTLIER_SAMPLE_FACTOR * max(median, 1e-12)]
    keep = np.ones(extremes.size, bool)
    keep[aside] = False
    keep &= finite
    if not keep.any():
        return Bounds(0.0, 0.0, tuple(sorted(aside)))
    return Bounds(float(stats.sample_low[keep].min()), float(stats.sample_high[keep].max()), tuple(sorted(aside)))


def second_pass(run: Runner, data: Mapping[str, np.ndarray], first: Mapping[str, FirstPass],
                bounds: Mapping[str, Bounds], *, batch_size: int) -> dict[str, Histogram]:
    hists = {}
    for name, b in bounds.items():
        low, high = b.low, b.high
        if not high > low:  # a constant tensor: a tiny range around it keeps the arithmetic finite
            low, high = low - 1e-6, high + 1e-6
        hists[name] = Histogram(low, high)
        hists[name].mean = first[name].total / max(first[name].count, 1)  # centres the moments for kurtosis
    for _start, feeds in batches(data, batch_size, stage="calibration pass 2/2"):
        for name, value in run(feeds).items():
            if name in hists:
                hists[name].add(np.nan_to_num(value, nan=0.0))
    return hists


def memory_estimate(model: onnx.ModelProto, names: Collection[str], *, batch_size: int, samples: int) -> int:
    """Bytes: one batch of every exposed tensor (float32, unknown dims taken as 1), the histograms and the
    per-sample extremes. Logged before the passes start."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    per_batch = 0
    for name in names:
        dims = typed[name].type.tensor_type.shape.dim if name in typed else []
        size = batch_size
        for axis, d in enumerate(dims):
            if axis:
                size *= d.dim_value if d.HasField("dim_value") else 1
        per_batch += 4 * size
    return per_batch + len(names) * (BINS * 8 + samples * 16)
