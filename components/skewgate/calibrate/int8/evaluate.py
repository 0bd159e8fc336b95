"""FP32 vs INT8 on the eval set, in two views that never mix.

The verdict's view (`reference`, `judge`): final outputs of model *files*, each in a default ONNX Runtime session
(full graph optimisation, nothing exposed) — the graph that ships, where ORT fuses Q/DQ pairs into QLinearConv,
QGemm, QLinearMatMul, QLinearSoftmax and friends. Accuracy, top-1 agreement and KL come from here only.

The diagnostic view (`layerwise`): the same models with intermediates exposed as outputs, which stops those
fusions — so its numbers are not the deployed model's. It gives per-layer SQNR across the Q/DQ nodes, how far each
eval activation falls outside the calibrated range, and the output drop of that unfused graph (set beside the
deployed one, the gap is the share of the damage that the fused kernels add)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from skewgate.calibrate.int8.collect import batches
from skewgate.calibrate.int8.quantize import WEIGHTED_OPS
from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.layers import onnx_values, quantized_counterparts, with_intermediates
from skewgate.common.runtime import run_by_name, session

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Reference:
    """FP32 outputs over the eval set, computed once per run: every trial is judged against these, and what is
    derived from them alone (top-1, the distributions KL needs, the FP32 accuracy) is derived once too."""

    names: list[str]
    outputs: list[np.ndarray]
    probabilities: frozenset[str]  # outputs a Softmax produces: compared as probabilities, not logits
    labels: np.ndarray | None
    labelled: str | None  # the output the labels score: the first classifier output

    @cached_property
    def classifiers(self) -> list[str]:
        """Outputs with a class axis last (rank ≥ 2, more than one class): top-1 agreement applies."""
        return [n for n, o in zip(self.names, self.outputs, strict=True) if o.ndim >= 2 and o.shape[-1] > 1]

    @cached_property
    def scored(self) -> dict[str, Scored]:
        """Each classifier output's top-1 and distribution."""
        return {n: score(self.outputs[self.names.index(n)], probabilities=n in self.probabilities)
                for n in self.classifiers}

    @cached_property
    def accuracy(self) -> float | None:
        if self.labels is None or self.labelled is None:
            return None
        return float(np.mean(self.scored[self.labelled].top1 == self.labels))


@dataclass
class Evaluation:
    drop: float  # accuracy drop with labels, else the worst top-1 disagreement over the classifier outputs
    accuracy_fp32: float | None
    accuracy_int8: float | None
    logits: dict[str, float]  # the first classifier output's agreement figures (top1_agreement, kl_divergence, …)
    outputs: dict[str, dict[str, float | None]] = field(default_factory=dict)  # per output: agreement, SQNR
    sha256: str = ""  # of the judged file


@dataclass
class Layerwise:
    """The diagnostic view (see the module docstring)."""

    layers: list[dict[str, Any]]  # value, node, op, module, sqnr_db, introduced_db, nodes
    uncovered: dict[str, float]  # tensor → fraction of eval values outside its calibrated range
    drop: float  # the output drop of the exposed, unfused INT8 graph (not the deployed model's)


def deployed_session(path: str | Path) -> Any:
    """The session a server would build from the file: default options (ORT_ENABLE_ALL), CPU."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def cpu_flags() -> list[str]:
    """The CPU's feature flags as Linux lists them (x86's `flags` line); empty where that is unknown (no
    /proc/cpuinfo, or an architecture that lists its features otherwise)."""
    try:
        return next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("flags")), [])
    except OSError:
        return []


def platform() -> dict[str, Any]:
    """Where the deployed figures were measured: ORT's integer kernels differ by CPU (without VNNI, u8×s8 pairs
    are summed in int16 and can saturate), so an INT8 verdict holds for this kind of machine."""
    import onnxruntime as ort

    flags = cpu_flags()
    return {"onnxruntime": ort.__version__, "provider": "CPUExecutionProvider",
            "vnni": any(f in ("avx512_vnni", "avx_vnni", "amx_int8") for f in flags) if flags else None}


def deployed_outputs(path: str | Path, data: Mapping[str, np.ndarray], *, batch_size: int,
                     stage: str) -> tuple[list[str], list[np.ndarray]]:
    """Every graph output of the model file over `data`, in batches."""
    run = deployed_session(path)
    names = [o.name for o in run.get_outputs()]
    parts: list[list[np.ndarray]] = [[] for _ in names]
    for _start, feeds in batches(data, batch_size, stage=stage):
        for part, value in zip(parts, run.run(None, feeds), strict=True):
            part.append(value)
    return names, [np.concatenate(p) for p in parts]


def reference(fp32_path: str | Path, fp32: onnx.ModelProto, data: Mapping[str, np.ndarray],
              labels: np.ndarray | None, *, batch_size: int, source: str | Path) -> Reference:
    """The FP32 model's outputs as deployed. `source` names the labels' file in errors."""
    names, outputs = deployed_outputs(fp32_path, data, batch_size=batch_size, stage="FP32 reference outputs")
    producers = {o: n.op_type for n in fp32.graph.node for o in n.output}
    ref = Reference(names, outputs, frozenset(n for n in names if producers.get(n) == "Softmax"), labels, None)
    if labels is None:
        return ref
    if not ref.classifiers:
        raise InputError(source, field="labels", expected="a model output with a class axis last to score them on",
                         found=f"outputs of shapes {[list(o.shape) for o in outputs]}")
    return Reference(names, outputs, ref.probabilities, labels, ref.classifiers[0])


def judge(ref: Reference, int8_path: str | Path, data: Mapping[str, np.ndarray], *, batch_size: int) -> Evaluation:
    """The verdict's figures for the INT8 model file `int8_path`, as deployed."""
    names, outputs = deployed_outputs(int8_path, data, batch_size=batch_size, stage="INT8 as deployed")
    if names != ref.names:
        raise RuntimeError(f"{int8_path}: outputs {names} differ from the FP32 model's {ref.names}")
    return compare(ref, dict(zip(names, outputs, strict=True)), sha256=sha256_file(int8_path))


def compare(ref: Reference, candidate: Mapping[str, np.ndarray], *, sha256: str = "") -> Evaluation:
    per_output: dict[str, dict[str, float | None]] = {}
    for name, expected in zip(ref.names, ref.outputs, strict=True):
        actual = candidate[name]
        figures: dict[str, float | None] = {"sqnr_db": _sqnr_db(actual, expected)}
        if name in ref.classifiers:
            figures.update(agree(ref.scored[name], score(actual, probabilities=name in ref.probabilities)))
        per_output[name] = figures
    classifiers = ref.classifiers
    logits = {k: v for k, v in per_output[classifiers[0]].items() if k != "sqnr_db" and v is not None} \
        if classifiers else {}
    acc_fp32 = ref.accuracy
    acc_int8 = None
    if acc_fp32 is not None and ref.labelled is not None:
        acc_int8 = float(np.mean(candidate[ref.labelled].argmax(-1) == ref.labels))
        drop = acc_fp32 - acc_int8
    else:
        drop = max((1.0 - float(per_output[n]["top1_agreement"] or 0.0) for n in classifiers), default=0.0)
    return Evaluation(drop, acc_fp32, acc_int8, logits, per_output, sha256)


class Scored(NamedTuple):
    top1: np.ndarray  # class index per sample
    p: np.ndarray  # float64 distribution over the last axis
    log_p: np.ndarray  # log(p + EPS)


EPS = 1e-12


def score(output: np.ndarray, *, probabilities: bool) -> Scored:
    """Top-1 and the distribution of a classifier output: softmax first unless the outputs are probabilities
    already (a Softmax head: a second softmax would flatten them and hide the damage)."""
    x = output.astype(np.float64)
    if probabilities:
        p = np.clip(x, 0.0, None)
        p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
    else:
        p = _softmax(x)
    return Scored(output.argmax(-1), p, np.log(p + EPS))


def agree(reference: Scored, candidate: Scored) -> dict[str, float]:
    """Top-1 agreement and KL(p_ref ‖ p_int8)."""
    return {"top1_agreement": float(np.mean(reference.top1 == candidate.top1)),
            "kl_divergence": float(np.mean(np.sum(reference.p * (reference.log_p - candidate.log_p), axis=-1)))}


def agreement(reference: np.ndarray, candidate: np.ndarray, *, probabilities: bool) -> dict[str, float]:
    """`agree` on two raw outputs."""
    return agree(score(reference, probabilities=probabilities), score(candidate, probabilities=probabilities))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sqnr_db(actual: np.ndarray, expected: np.ndarray) -> float | None:
    noise = float(np.sum((actual.astype(np.float64) - expected) ** 2))
    if noise == 0:
        return None  # identical
    return 10 * math.log10(max(float(np.sum(expected.astype(np.float64) ** 2)), 1e-300) / noise)


KEEP_BYTES = 64 * 2**20  # FP32 intermediates kept for the second layerwise view; beyond this they are recomputed


class Fp32Side:
    """The layerwise view's FP32 side, one per run: the FP32 model with intermediates exposed, its session built
    once, and its values over the eval set kept (up to `keep_bytes`, so memory stays bounded) — the view of the
    final INT8 model then compares against them instead of running FP32 over the eval set again."""

    def __init__(self, model: onnx.ModelProto, data: Mapping[str, np.ndarray], *, batch_size: int,
                 keep_bytes: int = KEEP_BYTES) -> None:
        self.model, self.data, self.batch_size, self.keep_bytes = model, data, batch_size, keep_bytes
        self.values = onnx_values(model)
        self.runs = 0  # passes of the FP32 model over the eval set (what the kept values save)
        self._exposed: frozenset[str] = frozenset()
        self._session: Any = None
        self._kept: list[dict[str, np.ndarray]] | None = None

    def batches(self, names: Collection[str], *, stage: str) -> Iterator[tuple[dict[str, np.ndarray],
                                                                              dict[str, np.ndarray]]]:
        """Per eval batch: its feeds, and the FP32 graph outputs and values `names` (at least) with the feeds."""
        wanted = frozenset(names) - set(self.data)
        if self._kept is not None and wanted <= self._exposed:
            for (_start, feeds), values in zip(batches(self.data, self.batch_size, stage=stage), self._kept,
                                               strict=True):
                yield feeds, {**feeds, **values}
            return
        if self._session is None or not wanted <= self._exposed:
            self._session = session(with_intermediates(self.model, sorted(wanted)), arena=False)
            self._exposed, self._kept = wanted, None
        kept: list[dict[str, np.ndarray]] | None = []
        size = 0
        self.runs += 1
        for _start, feeds in batches(self.data, self.batch_size, stage=stage):
            values = run_by_name(self._session, feeds)
            if kept is not None:
                size += sum(v.nbytes for v in values.values())
                kept = [*kept, values] if size <= self.keep_bytes else None
            yield feeds, {**feeds, **values}
        self._kept = kept


def layerwise(fp32: Fp32Side, int8: onnx.ModelProto, ref: Reference, *,
              ranges: Mapping[str, tuple[float, float]] | None = None) -> Layerwise:
    """Per-layer SQNR and (given `ranges`) coverage of the calibrated ranges, with intermediates exposed."""
    data = fp32.data
    # node outputs, and the graph inputs too: their own quantisation error
    pairs = quantized_counterparts([*data, *fp32.values], onnx_values(int8))  # INT8 value → FP32 value
    int8_session = session(with_intermediates(int8, [p for p in pairs if p not in data]), arena=False)
    errors: dict[str, RunningError] = {}
    outside: dict[str, list[int]] = {}  # tensor → [out of range, total]
    rng = np.random.default_rng(0)
    exposed: dict[str, list[np.ndarray]] = {n: [] for n in ref.names}
    for feeds, a in fp32.batches({*pairs.values(), *(ranges or {})},
                                 stage="layerwise FP32 vs INT8 (diagnostic)"):
        b = {**feeds, **run_by_name(int8_session, feeds)}
        for name in ref.names:
            exposed[name].append(b[name])
        for int8_name, name in pairs.items():
            if int8_name in b and name in a:
                errors.setdefault(name, RunningError(Tolerance(0.0, 0.0))).update(b[int8_name], a[name], rng)
        for name, (low, high) in (ranges or {}).items():
            if name in a:
                counts = outside.setdefault(name, [0, 0])
                counts[0] += int(((a[name] < low) | (a[name] > high)).sum())
                counts[1] += a[name].size
        del a, b
    unfused = compare(ref, {n: np.concatenate(v) for n, v in exposed.items()})
    return Layerwise(_layer_rows(fp32.values, errors, data), {k: v[0] / max(v[1], 1) for k, v in outside.items()},
                     unfused.drop)


def _layer_rows(values: Mapping[str, Any], errors: Mapping[str, RunningError],
                inputs: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """One row per compared value in topological order. `introduced_db` is how much SQNR was lost since the
    nearest compared values upstream (negative: error was added); `nodes` are the nodes in between that added it
    (the quantiser fuses some ops, e.g. Conv + Relu, so one compared value can stand for several nodes)."""
    sqnr = {name: err.sqnr_db for name, err in errors.items()}
    rows = []
    for name in [n for n in inputs if n in errors] + sorted((n for n in errors if n in values),
                                                            key=lambda n: values[n].depth):
        value = values.get(name)
        upstream, nodes = _upstream(name, values, sqnr)
        introduced = sqnr[name] - min(upstream) if upstream else 0.0
        rows.append({"value": name, "node": value.node if value else "<input>",
                     "op": value.op_type if value else "input", "module": value.module if value else "<input>",
                     "sqnr_db": None if math.isinf(sqnr[name]) else sqnr[name],
                     "introduced_db": None if math.isinf(introduced) or math.isnan(introduced) else introduced,
                     "nodes": nodes})
    return rows


def _upstream(name: str, values: Mapping[str, Any], sqnr: Mapping[str, float]) -> tuple[list[float], list[str]]:
    """SQNRs of the nearest compared ancestors of `name`, and the nodes from them to `name`."""
    if name not in values:
        return [], []
    found, nodes, seen = [], [values[name].node], {name}
    stack = list(values[name].inputs)
    while stack:
        current = stack.pop()
        if not current or current in seen:
            continue
        seen.add(current)
        if current in sqnr:
            found.append(sqnr[current])
        elif current in values:
            nodes.append(values[current].node)
            stack.extend(values[current].inputs)
    return found, nodes


def sensitivity(rows: list[dict[str, Any]], quantized: Mapping[str, str]) -> list[str]:
    """Node names to keep in FP32, most error introduced first; of one row's nodes, the weighted ops.
    `quantized`: node name → op type, for the nodes the quantiser handles."""
    ordered: dict[str, None] = {}
    for row in sorted(rows, key=lambda r: r["introduced_db"] if r["introduced_db"] is not None else 0.0):
        if (row["introduced_db"] or 0.0) >= 0:
            break
        weighted = [n for n in row["nodes"] if quantized.get(n) in WEIGHTED_OPS]
        for node in weighted or [row["node"]]:  # a Relu kept in FP32 beside a quantised Conv changes nothing
            if node in quantized:
                ordered.setdefault(node, None)
    return list(ordered)
