"""Streaming activation statistics for calibration, in bounded memory and independent of sample order.

Pass 1 records, per tensor, each sample's min and max (one pair of floats per sample: the calibration data is
larger), the global extremes, and per-channel |max| for the tensors that equalization may rescale — reduced
inside the graph, so only those few floats leave ONNX Runtime. From those,
`robust_bounds` drops the few samples whose extremes stand far above the rest, so a corrupted sample or a rare
spike never sets the histogram range. Pass 2 fills a fixed-range histogram per tensor over those bounds (values
beyond are counted, not binned). Histogram counts are integers and the bounds are functions of the set of
per-sample extremes, so the result is the same for any order or batch size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.common.layers import with_intermediates
from skewgate.common.runtime import run_by_name, session

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)
BINS = 2048
OUTLIER_SAMPLE_FACTOR = 4.0  # a sample whose |max| is this many times the median sample's is an outlier …
MAX_OUTLIER_SAMPLES = 0.02  # … and at most this fraction of the samples (at least one) may be set aside
INFINITE = float(np.finfo(np.float32).max) / 2  # at least this far from 0 counts as ±inf (see FirstPass.has_inf)
Runner = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass
class FirstPass:
    """Per tensor: every sample's extremes, the global extremes, and per-channel |max| when asked for."""

    sample_low: np.ndarray
    sample_high: np.ndarray
    channel_absmax: np.ndarray | None = None
    lowest: float = np.inf
    highest: float = -np.inf

    @property
    def has_nan(self) -> bool:
        return bool(np.isnan(self.sample_low).any() or np.isnan(self.sample_high).any())

    @property
    def has_inf(self) -> bool:
        """Some sample reaches ±inf, or float32's extremes: the dynamo exporter writes a −inf attention mask as
        float32's minimum (−3.4e38), which is infinity in all but name."""
        with np.errstate(invalid="ignore"):
            return bool((np.abs(self.sample_low) >= INFINITE).any() or (np.abs(self.sample_high) >= INFINITE).any())


@dataclass
class Histogram:
    """A fixed-range histogram with the values below and above its range counted apart."""

    low: float
    high: float
    counts: np.ndarray = field(default_factory=lambda: np.zeros(BINS, np.int64))
    below: int = 0
    above: int = 0

    @property
    def total(self) -> int:
        return int(self.counts.sum()) + self.below + self.above

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.low, self.high, BINS + 1)

    @property
    def centres(self) -> np.ndarray:
        edges = self.edges
        return (edges[:-1] + edges[1:]) / 2

    @property
    def kurtosis(self) -> float:
        """Pearson kurtosis (3 for a Gaussian) of the binned values; set-aside samples' values are not in it."""
        n = int(self.counts.sum())
        if not n:
            return 0.0
        centres = self.centres
        mean = float(np.dot(self.counts, centres)) / n
        squared = (centres - mean) ** 2
        variance = float(np.dot(self.counts, squared)) / n
        return float(np.dot(self.counts, squared**2)) / n / variance**2 if variance > 0 else 0.0

    def add(self, values: np.ndarray) -> None:
        # float32 and one bincount: this runs on every calibrated tensor of every batch
        flat = np.asarray(values, dtype=np.float32).ravel()
        below, above = int(np.count_nonzero(flat < self.low)), int(np.count_nonzero(flat > self.high))
        scaled = (flat - np.float32(self.low)) * np.float32(BINS / (self.high - self.low))
        np.clip(scaled, 0, BINS - 1, out=scaled)  # `high` itself → the last bin
        counts = np.bincount(scaled.astype(np.int32), minlength=BINS)
        counts[0] -= below  # values beyond the range were clipped into the end bins: count them apart
        counts[-1] -= above
        self.counts += counts
        self.below += below
        self.above += above


class ActivationRunner:
    """Runs an ONNX model with the chosen tensors exposed as outputs; graph inputs come from the feeds."""

    def __init__(self, model: onnx.ModelProto, names: Collection[str]) -> None:
        inputs = {i.name for i in model.graph.input}
        self.session = session(with_intermediates(model, [n for n in names if n not in inputs]))
        self.names = list(names)

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        produced = run_by_name(self.session, feeds)
        return {n: feeds[n] if n in feeds else produced[n] for n in self.names if n in feeds or n in produced}


Extremes = dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]  # per-sample min, max; channel |max|


def extremes_of(values: Mapping[str, np.ndarray], channels: Collection[str] = ()) -> Extremes:
    """Pass 1's reductions in numpy: min and max over every axis but the first, |max| per channel (axis 1)."""
    out: Extremes = {}
    for name, value in values.items():
        flat = value.reshape(len(value), -1) if value.ndim and value.size else value.reshape(1, -1)
        per_channel = None
        if name in channels and value.ndim >= 2:
            per_channel = np.abs(np.moveaxis(value, 1, 0).reshape(value.shape[1], -1)).max(axis=1)
        out[name] = (flat.min(axis=1), flat.max(axis=1), per_channel)
    return out


class ExtremesRunner:
    """Pass 1 inside the graph: ReduceMin/ReduceMax over all axes but the batch axis (and Abs → ReduceMax per
    channel), so each run hands back a few floats per sample instead of every activation. Tensors of unknown or
    low rank are exposed whole and reduced in numpy."""

    def __init__(self, model: onnx.ModelProto, names: Collection[str], channels: Collection[str] = ()) -> None:
        import onnx
        from onnx import helper

        copy = onnx.shape_inference.infer_shapes(model)
        typed = {v.name: v for v in (*copy.graph.value_info, *copy.graph.input, *copy.graph.output)}
        opset = next((o.version for o in copy.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.channels, self.reduced, self.whole = set(channels), [], []
        for name in names:
            dims = typed[name].type.tensor_type.shape.dim if name in typed else None
            if dims is None or len(dims) < 2 or not typed[name].type.tensor_type.HasField("shape"):
                self.whole.append(name)
                continue
            self.reduced.append(name)
            wanted = [("min", "ReduceMin", name, list(range(1, len(dims)))),
                      ("max", "ReduceMax", name, list(range(1, len(dims))))]
            if name in self.channels:
                copy.graph.node.append(helper.make_node("Abs", [name], [f"{name}::abs"]))
                wanted.append(("channels", "ReduceMax", f"{name}::abs", [0, *range(2, len(dims))]))
            for kind, op, source, axes in wanted:
                out = f"{name}::{kind}"
                if opset >= 18:  # axes became an input in opset 18
                    copy.graph.initializer.append(onnx.numpy_helper.from_array(np.array(axes, np.int64), f"{out}:axes"))
                    copy.graph.node.append(helper.make_node(op, [source, f"{out}:axes"], [out], keepdims=0))
                else:
                    copy.graph.node.append(helper.make_node(op, [source], [out], keepdims=0, axes=axes))
                copy.graph.output.append(helper.make_tensor_value_info(out, typed[name].type.tensor_type.elem_type,
                                                                       None))
        self.session = session(with_intermediates(copy, self.whole) if self.whole else copy)

    def __call__(self, feeds: dict[str, np.ndarray]) -> Extremes:
        produced = run_by_name(self.session, feeds)
        out: Extremes = {name: (produced[f"{name}::min"], produced[f"{name}::max"], produced.get(f"{name}::channels"))
                         for name in self.reduced}
        whole = {n: feeds[n] if n in feeds else produced[n] for n in self.whole if n in feeds or n in produced}
        out.update(extremes_of(whole, self.channels))
        return out


def batches(data: Mapping[str, np.ndarray], batch_size: int, *, stage: str) -> Iterator[tuple[int, dict]]:
    """(first sample index, feeds) per batch, with progress on stderr every quarter."""
    n = len(next(iter(data.values())))
    step = max(1, n // 4)
    for start in range(0, n, batch_size):
        yield start, {k: v[start : start + batch_size] for k, v in data.items()}
        done = min(start + batch_size, n)
        if done // step != start // step or done == n:
            log.info("%s: %d/%d samples", stage, done, n)


def scan(run: Callable[[dict[str, np.ndarray]], Any], data: Mapping[str, np.ndarray], batch_size: int, *,
         stage: str, consume: Callable[[int, int, Any], None]) -> None:
    """Run every batch and hand (first sample index, rows, values) to `consume` on a second thread, so that the
    statistics of batch k overlap the run of batch k+1 (ONNX Runtime and numpy release the GIL); at most two
    batches of values are alive."""
    with ThreadPoolExecutor(max_workers=1) as worker:
        pending = None
        for start, feeds in batches(data, batch_size, stage=stage):
            values = run(feeds)
            if pending is not None:
                pending.result()
            pending = worker.submit(consume, start, len(next(iter(feeds.values()))), values)
        if pending is not None:
            pending.result()


def first_pass(extremes: Callable[[dict[str, np.ndarray]], Extremes], data: Mapping[str, np.ndarray],
               names: list[str], *, batch_size: int, stage: str = "calibration pass 1/2") -> dict[str, FirstPass]:
    n = len(next(iter(data.values())))
    stats = {name: FirstPass(np.full(n, np.inf), np.full(n, -np.inf)) for name in names}

    def record(start: int, rows: int, values: Extremes) -> None:
        for name, (low, high, per_channel) in values.items():
            s = stats[name]
            low, high = _per_sample(low, rows, np.min), _per_sample(high, rows, np.max)
            s.sample_low[start : start + rows] = low
            s.sample_high[start : start + rows] = high
            s.lowest, s.highest = min(s.lowest, float(low.min())), max(s.highest, float(high.max()))
            if per_channel is not None:
                s.channel_absmax = per_channel if s.channel_absmax is None else np.maximum(s.channel_absmax,
                                                                                          per_channel)

    scan(extremes, data, batch_size, stage=stage, consume=record)
    return stats


def _per_sample(reduced: np.ndarray, rows: int, reduce: Callable[..., np.ndarray]) -> np.ndarray:
    if reduced.ndim == 1 and reduced.shape[0] == rows:
        return np.asarray(reduced, dtype=np.float64)
    # a tensor without the batch axis first: its extreme is charged to every sample of the batch
    return np.full(rows, float(reduce(reduced)) if reduced.size else np.nan)


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

    def fill(_start: int, _rows: int, values: dict[str, np.ndarray]) -> None:
        for name, value in values.items():
            if name in hists:
                # NaN has no bin: pass 1 saw it as NaN extremes, and it counts as 0 here
                hists[name].add(np.nan_to_num(value, nan=0.0) if first[name].has_nan else value)

    # Half batches: with binning overlapping the next run, two of them hold what one batch would.
    scan(run, data, max(1, batch_size // 2), stage="calibration pass 2/2", consume=fill)
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
