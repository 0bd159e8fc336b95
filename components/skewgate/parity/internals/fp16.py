"""FP16 candidate vs the FP32 model, value by value: name the first value that overflows or loses precision,
and find which nodes to keep in FP32 so that it does not.

The candidate is given, or made from the FP32 model with onnxconverter-common's float16 converter (graph inputs
and outputs stay FP32). Both run with every intermediate exposed. Exposing matters beyond seeing them: ONNX
Runtime's CPU provider computes FP16 ops it has no FP16 kernel for in FP32 and drops the Cast pairs between
them, so a chain like Gemm → Mul → Softmax never rounds to FP16 on the CPU and its overflow never shows in the
final output, while on a GPU it does. An exposed value is stored in FP16 as the graph declares, so an
overflow in storage is caught where it happens, on any provider.

A value fails when it is non-finite where FP32 is finite (overflow), or its SQNR against FP32 falls below the
floor. The first failing value whose inputs are clean names the culprit; the node that makes it (for a Cast the
converter inserted, the nodes that read it) joins the keep-in-FP32 list, the model is converted again, and the
loop repeats until the candidate passes, the list stops growing, or `max_rounds` is spent.

Elements FP32 holds beyond FP16's range that the candidate holds at a finite value of the same sign are
saturated, not noise: the converter clamps constants to ±65504, so a causal attention mask (−inf, or float32's
minimum) and the scores it is added to become about −65504, which softmax treats exactly as −inf. Whether
saturation matters shows in the values computed from them, judged as usual; when one of those fails, the nodes
making its saturated inputs join the keep-in-FP32 list with its own.

Elements FP32 holds below FP16's normal range (nonzero, |x| < 6.1e-5) that the candidate holds at zero or an FP16
subnormal are underflowed, not noise either: a ConvNeXt layer scale (γ = 1e-6 at init) puts γ·f(x) in FP16's
subnormals, a few bits each (18 dB), and the residual Add that reads it absorbs them; judged by themselves, every
block failed, and the keep-in-FP32 search took one block a round. They count as matching in their own value and,
as saturated ones, are judged by the values computed from them; when one of those fails, the nodes making its
saturated or underflowed inputs, and theirs back to where the range is lost, join the keep-in-FP32 list with its
own. A graph output has nothing computed from it: its underflowed elements are reported and judged as is. On the
CPU provider a consumer reads its input before the rounding to FP16 (the dropped Cast pairs), so there it sees
underflowed constants, not underflowed storage; the CUDA provider sees both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.layers import onnx_values, with_intermediates
from skewgate.common.output_tasks import Agreement, agreements, resolve_outputs, worst
from skewgate.common.runtime import run_by_name, session
from skewgate.common.verdict import Check

PAIR = "fp32_vs_fp16"
FP16_MAX = float(np.finfo(np.float16).max)  # 65504
FP16_TINY = float(np.finfo(np.float16).tiny)  # 6.1e-5, FP16's smallest normal: below it only subnormals (or 0)
FP16_STEP = 2.0**-24  # the spacing of FP16's subnormals
_TINY_BITS = int(np.array(FP16_TINY, np.float32).view(np.uint32))  # a float32 magnitude's bits order as it does


@dataclass(frozen=True)
class Fp16Options:
    # one FP16 rounding is ~70 dB; a deep net accumulates a few dozen of them
    min_sqnr_db: float = 35.0
    min_top1_agreement: float = 0.99  # every output's agreement share, judged as INT8's is
    task: str = "auto"  # every output's task and class axis, and its limits (common/output_tasks.py)
    class_axis: int | None = None
    output_tasks: Mapping[str, str] = field(default_factory=dict)  # output name → "TASK[:AXIS]", over `task`
    min_cosine_similarity: float = 0.99
    max_regression_error: float = 0.05
    max_rounds: int = 8
    batch_size: int = 32
    # run both models on the CUDA provider, as a GPU server does (FP16 kernels throughout; the CPU provider
    # upcasts the ops it has no FP16 kernel for, which is why values are judged exposed, one by one)
    cuda: bool = False


@dataclass
class Fp16Evaluation:
    errors: dict[str, RunningError]  # FP16-graph value → its error against the FP32 value it stands for
    overflow: dict[str, int]  # FP16-graph value → elements non-finite where FP32 is finite
    saturated: dict[str, int]  # FP16-graph value → elements beyond FP16's range held finite (see the docstring)
    underflowed: dict[str, int]  # FP16-graph value → elements below FP16's normal range held at 0/subnormal (ditto)
    keep: dict[str, list[str]]  # FP16-graph value → FP32 node names to keep in FP32 if it fails
    first: str | None
    culprits: list[str]  # FP32 nodes to keep so that `first` stops failing
    top1_agreement: float  # the worst output's agreement share (top-1 for classes; cosine, error otherwise)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def convert(model: Any, keep_fp32: list[str]) -> Any:
    """FP16 copy of `model` with graph I/O in FP32 and the nodes named in `keep_fp32` left in FP32."""
    import onnx
    from onnxconverter_common import float16

    if keep_fp32:
        # The converter keeps an initializer FP32 only if no value_info names it (else it converts it, clamped,
        # and casts it back up for the kept nodes); the dynamo exporter names every initializer. So drop that
        # entry for the initializers only kept nodes read: a constant past FP16's range then reaches them intact.
        model = onnx.ModelProto.FromString(model.SerializeToString())
        kept, readers = set(keep_fp32), dict[str, set[str]]()
        for node in model.graph.node:
            for value in node.input:
                readers.setdefault(value, set()).add(node.name)
        only_kept = {i.name for i in model.graph.initializer if i.name in readers and readers[i.name] <= kept}
        entries = [v for v in model.graph.value_info if v.name not in only_kept]
        del model.graph.value_info[:]
        model.graph.value_info.extend(entries)
    # constants beyond FP16's range are a finding to report, not something to clamp silently to 1e4
    return float16.convert_float_to_float16(model, keep_io_types=True, max_finite_val=65504.0,
                                            node_block_list=keep_fp32 or None)


def evaluate(fp32_layers: Any, fp32_model: Any, candidate: Any, feeds: Mapping[str, np.ndarray],
             options: Fp16Options) -> Fp16Evaluation:
    """Stream `feeds` through both models (FP32 intermediates from `fp32_layers`, a session built once)."""
    from skewgate.parity.core import first_divergence

    lineage = _Lineage.of(candidate, fp32_model)
    reference, keep = _counterparts(fp32_model, candidate, lineage)
    tally, kept = _stream(fp32_layers, fp32_model, candidate, reference, feeds, options)

    def bad(err: RunningError) -> bool:
        return err.count > 0 and (overflows[id(err)] > 0 or err.sqnr_db < options.min_sqnr_db)

    overflows = {id(tally.errors[v]): tally.overflow[v] for v in tally.errors}
    failed = [v for v, e in tally.errors.items() if bad(e)]
    first = first_divergence(onnx_values(candidate), tally.errors, bad) if failed else None
    # the nodes to keep for it: its own, and those making its out-of-range inputs
    suspects = [first, *_out_of_range_sources(first, lineage, tally)] if first else []
    culprits = list(dict.fromkeys(k for v in suspects for k in keep.get(v, [])))
    name, judged = _agreement(kept, options)
    top1 = judged.agreement
    if not judged.meets(options.min_top1_agreement):
        failed.append(f"agreement {top1:.1%} on {name}")
    return Fp16Evaluation(tally.errors, tally.overflow, tally.saturated, tally.underflowed, keep, first, culprits,
                          top1, failed)


@dataclass(frozen=True)
class _Lineage:
    """Which node of the candidate makes each value and which read it, and which nodes the FP32 model has (the
    others are Casts the converter inserted)."""

    made_by: dict[str, Any]  # value → the candidate's node that makes it
    readers: dict[str, list[str]]  # value → the names of the candidate's nodes that read it
    fp32_nodes: set[str]

    @classmethod
    def of(cls, candidate: Any, fp32_model: Any) -> _Lineage:
        readers: dict[str, list[str]] = {}
        for node in candidate.graph.node:
            for value in node.input:
                readers.setdefault(value, []).append(node.name)
        return cls(made_by={value: node for node in candidate.graph.node for value in node.output}, readers=readers,
                   fp32_nodes={n.name for n in fp32_model.graph.node})

    def behind_casts(self, value: str) -> str:
        """The value a chain of the converter's Casts starts from (`value` itself when none)."""
        while ((maker := self.made_by.get(value)) is not None and maker.op_type == "Cast"
               and maker.name not in self.fp32_nodes):
            value = maker.input[0]
        return value


def _counterparts(fp32_model: Any, candidate: Any, lineage: _Lineage,
                  ) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The candidate's values to compare: each with the FP32 value it stands for, and with the FP32 nodes to keep in
    FP32 if it fails."""
    fp32_names = {o for n in fp32_model.graph.node for o in n.output if o} | {i.name for i in fp32_model.graph.input}
    fp32_nodes = lineage.fp32_nodes
    reference: dict[str, str] = {}  # FP16-graph value → FP32 value
    keep: dict[str, list[str]] = {}
    for node in candidate.graph.node:
        for value in node.output:
            if node.name in fp32_nodes:
                if value in fp32_names:
                    reference[value], keep[value] = value, [node.name]
                continue
            # a Cast the converter inserted: to keep the value out of FP16, keep the nodes reading it in FP32
            if value in fp32_names:
                reference[value] = value
            elif node.op_type == "Cast" and node.input[0] in fp32_names:
                reference[value] = node.input[0]
            else:
                continue
            keep[value] = [r for r in lineage.readers.get(value, []) if r in fp32_nodes]
            source = lineage.made_by.get(node.input[0]) if node.input else None
            if value in fp32_names and source is not None and source.name in fp32_nodes:
                # the Cast back to FP32 after a graph output's node (I/O kept FP32): keep that node
                keep[value].insert(0, source.name)
    return reference, keep


@dataclass(frozen=True)
class _Tally:
    """Per compared value, over every batch: its error against FP32, and its elements out of FP16's range."""

    errors: dict[str, RunningError]
    overflow: dict[str, int]
    saturated: dict[str, int]
    underflowed: dict[str, int]

    @classmethod
    def of(cls, values: Mapping[str, str]) -> _Tally:
        return cls(errors={v: RunningError(Tolerance(0.0, 0.0)) for v in values},
                   overflow=dict.fromkeys(values, 0), saturated=dict.fromkeys(values, 0),
                   underflowed=dict.fromkeys(values, 0))

    def add(self, value: str, a: np.ndarray, e: np.ndarray, *, output: bool, rng: np.random.Generator) -> None:
        """One batch of `value`: the candidate's `a` against FP32's `e`; `output`: `value` is a graph output."""
        if not np.issubdtype(a.dtype, np.floating) or a.shape != e.shape:
            return
        self.overflow[value] += int(np.count_nonzero(~np.isfinite(a) & np.isfinite(e)))
        held_fp16 = a.dtype == np.float16
        # copies in C order: a's underflowed elements are overwritten below, through flat views of both
        a, e = a.astype(np.float32, order="C"), e.astype(np.float32, order="C")
        clamped, (lost, where) = _out_of_range(a, e, held_fp16)
        if where is not None:
            self.underflowed[value] += lost
            if not output:  # nothing downstream judges a graph output's underflow: judged as is
                # held as FP32 holds them: in place is cheaper than cutting them out of a large value
                _hold(a, e, where)
        if clamped is not None and clamped.any():
            self.saturated[value] += int(np.count_nonzero(clamped))
            a, e = a[~clamped], e[~clamped]
        self.errors[value].update(a, e, rng)


def _stream(fp32_layers: Any, fp32_model: Any, candidate: Any, reference: Mapping[str, str],
            feeds: Mapping[str, np.ndarray], options: Fp16Options,
            ) -> tuple[_Tally, dict[str, dict[str, list[np.ndarray]]]]:
    """Both models batch by batch, every value in `reference` tallied, and both sides' graph outputs kept (for
    the agreement of each)."""
    layers = session(with_intermediates(candidate, list(reference)), arena=False, cuda=options.cuda)
    tally = _Tally.of(reference)
    outputs = [o.name for o in fp32_model.graph.output]
    kept: dict[str, dict[str, list[np.ndarray]]] = {"fp32": {o: [] for o in outputs}, "fp16": {o: [] for o in outputs}}
    rng = np.random.default_rng(0)
    n = len(next(iter(feeds.values())))
    for start in range(0, n, options.batch_size):
        batch = {k: v[start : start + options.batch_size] for k, v in feeds.items()}
        expected, actual = run_by_name(fp32_layers, batch), run_by_name(layers, batch)
        for value, source in reference.items():
            if value not in actual or source not in (expected.keys() | batch.keys()):
                continue
            e = expected[source] if source in expected else batch[source]
            tally.add(value, actual[value], e, output=value in outputs, rng=rng)
        for name in outputs:
            kept["fp32"][name].append(expected[name])
            kept["fp16"][name].append(actual[name])
        del expected, actual  # one batch of intermediates at a time
    return tally, kept


def _out_of_range_sources(value: str, lineage: _Lineage, tally: _Tally) -> list[str]:
    """The inputs of `value` that FP16 holds saturated or underflowed, and theirs, back to where the range is
    lost (seen through the converter's Casts, on both sides of each node): keeping only the nearest in FP32
    would leave the loss upstream of it."""
    found: list[str] = []
    todo = [value]
    while todo:
        maker = lineage.made_by.get(lineage.behind_casts(todo.pop()))
        inputs = {v for i in maker.input for v in (i, lineage.behind_casts(i))} if maker is not None else set()
        for i in sorted(inputs):
            if (tally.saturated.get(i) or tally.underflowed.get(i)) and i not in found:
                found.append(i)
                todo.append(i)
    return found


def _agreement(kept: Mapping[str, Mapping[str, list[np.ndarray]]], options: Fp16Options) -> tuple[str, Agreement]:
    """Every graph output judged as its task says (as INT8's are): the worst of them, and its name."""
    ref = {name: np.concatenate(parts) for name, parts in kept["fp32"].items()}
    cand = {name: np.concatenate(parts) for name, parts in kept["fp16"].items()}
    specs = resolve_outputs(ref, task=options.task, class_axis=options.class_axis, output_tasks=options.output_tasks)
    return worst(agreements(ref, cand, specs, min_cosine=options.min_cosine_similarity,
                            max_error=options.max_regression_error))


def _out_of_range(a: np.ndarray, e: np.ndarray, held_fp16: bool,
                  ) -> tuple[np.ndarray | None, tuple[int, np.ndarray | None]]:
    """The elements of candidate `a` (float32 now; `held_fp16`: as stored) held at the edge of FP16's range where
    FP32 `e` leaves it: saturated (a mask, None for none: beyond ±65504, held finite with the same sign) and
    underflowed (see `_underflowed`). This runs on every value of every batch, so the full tests run only where
    FP32 leaves FP16's range at all."""
    magnitude = np.abs(e)
    with np.errstate(invalid="ignore"):
        beyond = magnitude > FP16_MAX
        clamped = beyond & np.isfinite(a) & (np.signbit(a) == np.signbit(e)) if beyond.any() else None
    # 0 < |e| < tiny in two passes, in place: on the bits, minus one, unsigned (0 wraps to the top: a ReLU's zeros
    # lose nothing, and would otherwise send almost every value down the full test)
    bits = magnitude.view(np.uint32)
    bits -= 1
    small = bits < _TINY_BITS - 1
    return clamped, _underflowed(a, small, held_fp16, scratch=magnitude) if small.any() else (0, None)


def _underflowed(a: np.ndarray, small: np.ndarray, held_fp16: bool, *, scratch: np.ndarray,
                 ) -> tuple[int, np.ndarray | None]:
    """Of the elements FP32 holds `small` (nonzero, below FP16's smallest normal), those the candidate holds at
    zero or an FP16 subnormal: how many, and where in `a` flattened (a mask or indices; None for none).
    `scratch`: a float32 buffer of a's shape to overwrite (large allocations cost as much as the passes)."""
    if np.count_nonzero(small) > small.size // 8:  # a layer-scaled value: whole-array passes beat gathering
        lost = small.reshape(-1)
        np.abs(a, out=scratch)
        lost &= scratch.reshape(-1) < FP16_TINY
        if not held_fp16:
            lost[lost] = _on_fp16_grid(a.reshape(-1)[lost])
        count = int(np.count_nonzero(lost))
    else:  # usually a handful: test those alone
        where = np.flatnonzero(small)
        held = a.reshape(-1)[where]
        hit = np.abs(held) < FP16_TINY
        if not held_fp16:
            hit &= _on_fp16_grid(held)
        lost = where[hit]
        count = lost.size
    return count, lost if count else None


def _hold(a: np.ndarray, e: np.ndarray, where: np.ndarray) -> None:
    """Set `a`'s elements at `where` (flat, a mask or indices) to `e`'s."""
    if where.dtype == np.bool_:
        np.copyto(a.reshape(-1), e.reshape(-1), where=where)  # a masked copy: twice as fast as mask indexing
    else:
        a.reshape(-1)[where] = e.reshape(-1)[where]


def _on_fp16_grid(held: np.ndarray) -> np.ndarray:
    """Whether values stored in FP32 (a graph output's Cast back, a node kept in FP32) sit on FP16's subnormal
    grid: only then did they pass through FP16's subnormals rather than being computed in FP32."""
    steps = held / FP16_STEP
    return np.asarray(steps == np.round(steps))


def fp16_checks(fp32_model: Any, candidate_path: str | Path | None, feeds: Mapping[str, np.ndarray],
                options: Fp16Options = Fp16Options(), *, write_fixed: str | Path | None = None,
                ) -> tuple[list[Check], dict[str, Any], list[dict[str, Any]]]:
    """Judge the FP16 candidate (converted from `fp32_model` when `candidate_path` is None); propose and
    verify the nodes to keep in FP32. Returns checks, details and one row per compared value."""
    import onnx

    given = candidate_path is not None
    candidate = _given(candidate_path, fp32_model) if candidate_path is not None else convert(fp32_model, [])
    fp32_layers = session(with_intermediates(fp32_model), arena=False, cuda=options.cuda)
    result = evaluate(fp32_layers, fp32_model, candidate, feeds, options)
    rows = _rows(result, candidate, options)
    details: dict[str, Any] = {"candidate": str(candidate_path) if given else "converted (onnxconverter-common)",
                               "first_failure": _describe_value(result, result.first, candidate),
                               "top1_agreement": result.top1_agreement, "values_compared": len(result.errors)}
    checks = [Check(f"{PAIR}.values", passed=result.ok, value=len(result.failed), limit=0,
                    detail=_summary(result, candidate, options))]
    if result.ok:
        details["keep_fp32"] = []
        return checks, details, rows

    keep: list[str] = []
    tried: list[dict[str, Any]] = []
    current = result if not given else evaluate(fp32_layers, fp32_model, convert(fp32_model, []), feeds, options)
    fixed = None
    for _ in range(options.max_rounds):
        if current.ok:
            fixed = keep
            break
        culprits = [k for k in current.culprits if k not in keep]
        if not culprits:
            break
        keep += culprits
        model = convert(fp32_model, keep)
        current = evaluate(fp32_layers, fp32_model, model, feeds, options)
        tried.append({"keep_fp32": list(keep), "passes": current.ok, "first_failure": current.first})
        if current.ok and write_fixed is not None:
            onnx.save(model, str(write_fixed))
    ops = {n.name: n.op_type for n in fp32_model.graph.node}
    details.update(proposal_rounds=tried, keep_fp32=fixed if fixed is not None else keep,
                   keep_fp32_ops=sorted({ops[k] for k in (fixed if fixed is not None else keep)}))
    checks.append(Check(f"{PAIR}.proposal", passed=fixed is not None, severity="warn", value=len(keep), limit=0,
                        detail=(f"keeping {len(keep)} node(s) in FP32 makes it pass (checked): "
                                f"{_named(keep, ops)}") if fixed is not None else
                        f"no keep-in-FP32 list found in {len(tried)} rounds; tried {_named(keep, ops)}"))
    return checks, details, rows


def _given(path: str | Path, fp32_model: Any) -> Any:
    """A given FP16 model: valid ONNX, with the FP32 model's input and output names (in that order)."""
    from skewgate.common.errors import InputError
    from skewgate.common.io import load_onnx, onnx_input_specs

    model = load_onnx(path)
    for field_name, ours, theirs in (
            ("inputs", [s.name for s in onnx_input_specs(fp32_model)], [s.name for s in onnx_input_specs(model)]),
            ("outputs", [o.name for o in fp32_model.graph.output], [o.name for o in model.graph.output])):
        if ours != theirs:
            raise InputError(path, field=field_name, expected=f"the FP32 model's {field_name} {ours}",
                             found=f"{theirs}")
    return model


def _named(nodes: list[str], ops: dict[str, str]) -> str:
    return ", ".join(f"{n} ({ops.get(n, '?')})" for n in nodes) or "nothing"


def _describe_value(result: Fp16Evaluation, value: str | None, candidate: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    values = onnx_values(candidate)
    where = values.get(value)
    behind = values.get(where.inputs[0]) if where is not None and where.op_type == "Cast" and where.inputs else None
    if behind is not None and behind.node in result.keep.get(value, []):
        where = behind  # a graph output's Cast back to FP32 (I/O kept FP32): name the node that computed it
    err = result.errors[value]
    return {"value": value, "op": where.op_type if where else "?", "module": where.module if where else "?",
            "node": where.node if where else "?", "overflowed": result.overflow[value],
            "saturated": result.saturated[value], "underflowed": result.underflowed[value],
            "sqnr_db": None if math.isinf(err.sqnr_db) else err.sqnr_db, "keep_fp32": result.keep.get(value, [])}


def _summary(result: Fp16Evaluation, candidate: Any, options: Fp16Options) -> str:
    if result.ok:
        worst = min((e.sqnr_db for e in result.errors.values() if e.count), default=math.inf)
        under = sum(1 for n in result.underflowed.values() if n)
        # say so: a value far below the floor on its own passes here, judged by the values computed from it
        absorbed = f", {under} underflow (judged by the values computed from them)" if under else ""
        return (f"FP16 vs FP32: {len(result.errors)} values, none overflows{absorbed}, worst SQNR {worst:.1f} dB "
                f"(floor {options.min_sqnr_db:g} dB)")
    first = _describe_value(result, result.first, candidate)
    if first is None:
        return "FP16 vs FP32: " + "; ".join(result.failed)
    cause = (f"overflows (inf/NaN in {first['overflowed']} elements where FP32 is finite)" if first["overflowed"]
             else f"SQNR {first['sqnr_db']:.1f} dB < {options.min_sqnr_db:g} dB")
    if first["underflowed"]:
        cause += f" ({first['underflowed']} elements underflow below FP16's normal range)"
    return (f"FP16 vs FP32: first failing value {first['value']!r} (op {first['op']}, module {first['module']}) "
            f"{cause}; {len(result.failed)} failing in all")


def _rows(result: Fp16Evaluation, candidate: Any, options: Fp16Options) -> list[dict[str, Any]]:
    values = onnx_values(candidate)
    rows = []
    for name, err in result.errors.items():
        if not (err.count or result.saturated[name] or result.underflowed[name]) or name not in values:
            continue
        sqnr = err.sqnr_db
        rows.append({"value": name, "op": values[name].op_type, "module": values[name].module,
                     "depth": values[name].depth, **err.summary(), "overflowed": result.overflow[name],
                     "saturated": result.saturated[name], "underflowed": result.underflowed[name],
                     "diverged": result.overflow[name] > 0 or sqnr < options.min_sqnr_db})
    return sorted(rows, key=lambda r: r["depth"])
