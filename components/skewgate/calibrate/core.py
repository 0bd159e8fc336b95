"""calibrate-int8: outlier-aware, bounded-memory INT8 calibration with an accuracy budget.

Steps: (1) pass 1 over the calibration set — per-sample extremes and per-channel |max|; (2) cross-layer
equalisation where a few channels carry outlier activations, checked against the original FP32 model by parity
rules; (3) pass 2 — robust fixed-range histograms; (4) a range per tensor (`auto`: least expected error);
(5) ONNX Runtime's QDQ quantiser with those ranges; (6) the written INT8 file vs the FP32 file on the eval set,
each in a default ONNX Runtime session — the graph as deployed, Q/DQ fused into QLinear kernels — beside a
layerwise view with intermediates exposed (diagnostic only: exposing them stops the fusions); (7) while the
deployed drop exceeds the budget, keep in FP32 what the evidence points at (int8/fallback.py) and try again
(int8/budget.py). The gate fails if the budget is never met, and the best model found is still written. (8) INT8
coverage: the share of MACs the written file runs in INT8, and the op types left in FP32 (a warning below
`min_int8_mac_share`). The internals are in `int8/`; run.py is the one entry of the CLI and the component.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import numpy as np

from skewgate.calibrate.int8 import collect
from skewgate.calibrate.int8.budget import BestTrial, budget_loop, trial_row
from skewgate.calibrate.int8.coverage import coverage, describe, macs_per_node
from skewgate.calibrate.int8.equalize import equalizable_pairs, equalize
from skewgate.calibrate.int8.evaluate import Evaluation, Fp32Side, judge, layerwise, platform, reference
from skewgate.calibrate.int8.quantize import WEIGHTED_OPS, Quantizer, nodes_touching, tensors_to_calibrate
from skewgate.calibrate.int8.ranges import Choice, Method, choose
from skewgate.calibrate.run import CalibrateOptions
from skewgate.common import mlflow_conventions as conv
from skewgate.common.compare import Tolerance
from skewgate.common.error_stats import RunningError
from skewgate.common.errors import InputError
from skewgate.common.io import load_npz, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.output_tasks import Agreement, check_task_options
from skewgate.common.resolution import describe as describe_resolution
from skewgate.common.runtime import session
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, Verdict

log = logging.getLogger(__name__)
STEP = "calibrate"
EQUALIZATION_TOLERANCE = Tolerance(rtol=1e-4, atol=1e-4)  # rescaling is exact up to float rounding


JUDGED = ("the --out file in a default ONNX Runtime session (full graph optimisation, no exposed intermediates); "
          "FP32 reference: the --onnx file, likewise")


@dataclass(frozen=True)
class Accuracy:
    fp32: float | None  # None without labels: the drop is then top-1 disagreement with FP32
    int8: float | None
    drop: float


@dataclass(frozen=True)
class UnfusedDrop:
    """The drop of the INT8 graph with intermediates exposed (diagnostic), before and after the budget loop."""

    first: float
    final: float


@dataclass(frozen=True)
class Int8File:
    path: str
    sha256: str


@dataclass(frozen=True)
class CalibrateDetails:
    """`details` of the calibrate verdict (JSON keys are the field names). Rows (trials, outlier tensors,
    equalisation records) stay mappings: they are also the MLflow tables."""

    method: Method
    samples: int
    memory_estimate_mib: float  # beside the calibration data
    equalization: tuple[Mapping[str, Any], ...]
    excluded_nodes: tuple[str, ...]  # kept in FP32 in the written model by the budget loop
    reduce_range: bool  # 7-bit weights in the written model
    trials: tuple[Mapping[str, Any], ...]
    judged: str
    judged_on: Mapping[str, Any]  # ORT version, provider, VNNI (integer kernels differ by CPU)
    accuracy: Accuracy
    logits: Mapping[str, float | None]  # the first output with classes: its agreement figures
    outputs: Mapping[str, Mapping[str, float | None]]
    unfused_drop: UnfusedDrop
    int8_coverage: Mapping[str, Any]
    outliers: tuple[Mapping[str, Any], ...]
    int8: Int8File
    # node → the ±inf tensor it reads or writes (an attention mask): always FP32; absent when there is none
    non_finite_fp32: Mapping[str, str] | None = field(default=None, metadata=OMIT_IF_NONE)
    # tensor ONNX Runtime's quantiser refused → the nodes kept in FP32 for it; absent when there is none
    quantiser_refused: Mapping[str, list[str]] | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class CalibrationResult:
    verdict: Verdict
    tensors: list[dict[str, Any]]  # one row per calibrated tensor: range, method, outlier statistics, coverage
    trials: list[dict[str, Any]]
    layers: list[dict[str, Any]]  # per-layer SQNR of the written model
    histograms: dict[str, collect.Histogram]
    ranges: dict[str, Choice]


def calibrate(*, onnx: str | Path, calibration: str | Path, eval_data: str | Path, out: str | Path,
              labels: str | Path | None = None, options: CalibrateOptions | None = None) -> CalibrationResult:
    options = options or CalibrateOptions()
    if options.method not in get_args(Method):
        raise InputError("method", expected=f"one of {get_args(Method)}", found=repr(options.method))
    check_task_options(task=options.task, class_axis=options.class_axis, output_tasks=options.output_tasks)
    model = load_onnx(onnx)
    specs = onnx_input_specs(model)
    calib = {s.name: v for s, v in zip(specs, _inputs(calibration, specs), strict=True)}
    samples = len(next(iter(calib.values())))
    if samples < options.min_calibration_samples:
        raise InputError(calibration, expected=f"at least {options.min_calibration_samples} calibration samples",
                         found=f"{samples}")
    eval_arrays = load_npz(eval_data, expected=specs)
    feeds = {s.name: eval_arrays[s.name] for s in specs}
    eval_samples = len(next(iter(feeds.values())))
    if not eval_samples:
        raise InputError(eval_data, expected="at least one eval sample to judge INT8 on", found="0 samples")
    truth = _labels(labels, eval_arrays, eval_data, eval_samples)
    weighted = [n for n in model.graph.node if n.op_type in WEIGHTED_OPS]
    if not weighted:
        raise InputError(onnx, expected=f"at least one quantisable op ({', '.join(WEIGHTED_OPS)})",
                         found=f"op types {sorted({n.op_type for n in model.graph.node})}")
    found = calibrate_ranges(model, calib, options)
    target, pairs_of_ranges, checks = found.model, found.pairs, list(found.checks)

    out = Path(out)
    # The figures that gate come from model files in default sessions (see evaluate.py): the FP32 reference
    # once per run, from the file given, for every trial; each INT8 candidate from the file written.
    ref = reference(onnx, model, feeds, truth, batch_size=options.batch_size, source=labels or eval_data,
                    task=options.task, class_axis=options.class_axis, output_tasks=options.output_tasks,
                    min_cosine=options.min_cosine_similarity,
                    max_error=options.max_regression_error)
    # the diagnostic view compares with the model that was calibrated: its tensors are the ones the ranges
    # describe, and its function is the original's (checked above when it was rescaled)
    fp32_side = Fp32Side(target, feeds, batch_size=options.batch_size)
    quantizer = Quantizer(target, pairs_of_ranges, per_channel=options.per_channel, keep_fp32=found.keep_fp32)
    quantizer.write(out)
    first_eval = judge(ref, out, feeds, batch_size=options.batch_size)
    first_view = layerwise(fp32_side, load_onnx(out), ref, ranges=pairs_of_ranges)
    trials = [trial_row(0, [], first_eval, tried="nothing (every op the quantiser handles)", kept=True)]
    best = BestTrial(first_eval)
    if not options.budget().met(first_eval):
        best = budget_loop(quantizer, ref, feeds, first_eval, first_view, out, trials, options.budget())
    final, excluded, seven_bit, view = best.result, best.excluded, best.reduce_range, first_view
    written = load_onnx(out)
    if excluded or seven_bit:  # the written model changed: its per-layer picture too
        view = layerwise(fp32_side, written, ref)
    if sha256_file(out) != final.sha256:
        raise RuntimeError(f"{out}: the file changed after it was judged")
    int8_coverage = coverage(written, macs_per_node(model, {k: v[:1] for k, v in feeds.items()}))

    tensors = _tensor_rows(found, first_view.uncovered, options, quantized=quantized_tensors(written))
    checks += _checks(final, excluded, tensors, trials, int8_coverage, options, seven_bit=seven_bit)
    details = CalibrateDetails(
        method=options.method, samples=samples, memory_estimate_mib=found.memory_estimate / 2**20,
        equalization=tuple(found.rescaled), excluded_nodes=tuple(excluded), reduce_range=seven_bit,
        trials=tuple(trials), judged=JUDGED, judged_on=platform(),
        accuracy=Accuracy(fp32=final.accuracy_fp32, int8=final.accuracy_int8, drop=final.drop),
        logits=final.logits, outputs=final.outputs,
        unfused_drop=UnfusedDrop(first=first_view.drop, final=view.drop), int8_coverage=int8_coverage,
        outliers=tuple(t for t in tensors if t["outlier"]), int8=Int8File(path=str(out), sha256=final.sha256),
        non_finite_fp32=found.keep_fp32 or None, quantiser_refused=quantizer.refused or None)
    registry_tags = {conv.CALIBRATE_EXCLUDED_TAG: ",".join(excluded) or "none",
                     conv.CALIBRATE_DROP_TAG: f"{final.drop:.4f}",
                     conv.CALIBRATE_MAC_SHARE_TAG: f"{int8_coverage['mac_share']:.4f}",
                     conv.CALIBRATE_INT8_SHA_TAG: final.sha256}
    # The subject is the FP32 model the gate judges (promote matches it against the file it promotes); the INT8
    # file it produced is in the details and the registry tags.
    subject = Subject(artifact=str(onnx), sha256=sha256_file(onnx),
                      data={"calibration": sha256_file(calibration), "eval": sha256_file(eval_data)})
    return CalibrationResult(Verdict.from_checks(STEP, checks, subject=subject, details=details,
                                                 registry_tags=registry_tags), tensors, trials,
                             view.layers, found.hists, found.ranges)


@dataclass(frozen=True)
class Calibration:
    """What the passes found: the model to quantise (equalised where needed), one range per tensor, the
    statistics behind them, and the equalisation records and check."""

    model: Any
    names: list[str]
    first: dict[str, collect.FirstPass]
    bounds: dict[str, collect.Bounds]
    hists: dict[str, collect.Histogram]
    ranges: dict[str, Choice]
    rescaled: list[dict[str, Any]]
    checks: list[Check]
    memory_estimate: int  # bytes, beside the calibration data
    keep_fp32: dict[str, str]  # node → the ±inf tensor it reads or writes: never quantised

    @property
    def pairs(self) -> dict[str, tuple[float, float]]:
        return {n: (c.low, c.high) for n, c in self.ranges.items()}


def calibrate_ranges(model: Any, data: dict[str, np.ndarray], options: CalibrateOptions) -> Calibration:
    """Steps 1–4: pass 1, equalisation (and its check), pass 2, a range per tensor."""
    names = tensors_to_calibrate(model)
    samples = len(next(iter(data.values())))
    estimate = collect.memory_estimate(model, names, batch_size=options.batch_size, samples=samples)
    log.info("calibrating %d tensors on %d samples; estimated memory beside the data: %.0f MiB", len(names),
             samples, estimate / 2**20)
    checks: list[Check] = []
    pairs = equalizable_pairs(model) if options.equalize else []
    first = collect.first_pass(collect.ExtremesRunner(model, names, {p.tensor for p in pairs}), data, names,
                               batch_size=options.batch_size)
    target, rescaled = model, list[dict[str, Any]]()
    if pairs:
        target, rescaled = equalize(model, pairs, {p.tensor: first[p.tensor].channel_absmax for p in pairs})
    if rescaled:
        checks.append(_equalization_check(model, target, data, rescaled, options.batch_size))
        first = collect.first_pass(collect.ExtremesRunner(target, names), data, names,
                                   batch_size=options.batch_size, stage="calibration pass 1/2 (equalised model)")
    # ±inf (an attention mask) has no INT8 range: a tensor holding it is not quantised, and the quantisable
    # nodes reading or writing it stay FP32 (quantised, −inf clamps to a small finite value: no mask; and
    # float32's minimum, the exporter's −inf, sets a scale that rounds every other value in the tensor to 0)
    infinite = [n for n in names if first[n].has_inf]
    kept = nodes_touching(target, infinite)
    names = [n for n in names if n not in infinite]
    if kept:
        named = ", ".join(f"{node} ({tensor})" for node, tensor in kept.items())
        checks.append(Check("non_finite", passed=True, value=len(kept),
                            detail=f"kept in FP32, as their tensors hold ±inf (or float32's extremes, as an "
                                   f"exported −inf mask does), which INT8 cannot: {named}"))
    bounds = {n: collect.robust_bounds(first[n]) for n in names}
    hists = collect.second_pass(collect.ActivationRunner(target, names), data, first, bounds,
                                batch_size=options.batch_size)
    ranges = {n: choose(hists[n], options.method) for n in names}
    return Calibration(target, names, first, bounds, hists, ranges, rescaled, checks, estimate, kept)


def _inputs(path: str | Path, specs: list[Any]) -> list[np.ndarray]:
    arrays = load_npz(path, expected=specs)
    return [arrays[s.name] for s in specs]


def _labels(path: str | Path | None, arrays: dict[str, np.ndarray], eval_data: str | Path,
            samples: int) -> np.ndarray | None:
    """Labels from `--labels` (a .npy, or an .npz holding `labels`), else a `labels` array beside the inputs,
    else none (top-1 agreement)."""
    if path is not None:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            raise InputError(path, expected="a .npy array of class indices", found=f"unreadable ({err})") from err
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                if "labels" not in loaded.files:
                    raise InputError(path, expected="a .npy array of class indices, or an .npz with a 'labels' array",
                                     found=f"an .npz of {sorted(loaded.files)}")
                loaded = loaded["labels"]
        found, source = loaded, path
    elif "labels" in arrays:
        found, source = arrays["labels"], eval_data
    else:
        return None
    if found.ndim < 1 or found.shape[0] != samples or found.dtype.kind not in "iu":
        raise InputError(source, field="labels", expected=f"integer class indices for {samples} eval samples (one "
                         "per sample, or one per pixel: N×H×W)",
                         found=f"{found.dtype}{list(found.shape)}")
    return found


def _equalization_check(original: Any, rescaled: Any, data: dict[str, np.ndarray], records: list[dict],
                        batch_size: int) -> Check:
    """The rescaled FP32 model must compute what the original does (parity rules on the outputs)."""
    sessions = [session(m) for m in (original, rescaled)]
    errors = [RunningError(EQUALIZATION_TOLERANCE) for _ in original.graph.output]
    rng = np.random.default_rng(0)
    for _start, feeds in collect.batches({k: v[:256] for k, v in data.items()}, batch_size,
                                         stage="checking the equalised FP32 model"):
        before, after = (s.run(None, feeds) for s in sessions)
        for err, a, b in zip(errors, after, before, strict=True):
            err.update(a, b, rng)
    worst = max(e.worst_ratio for e in errors)
    what = ", ".join(f"{r['tensor']} ({r['channels_rescaled']} channels, spread {r['channel_spread_before']:.0f}× → "
                     f"{r['channel_spread_after']:.1f}×)" for r in records)
    return Check("equalization.fp32_unchanged", passed=all(e.ok for e in errors), value=worst, limit=1.0,
                 detail=f"rescaled {what}; FP32 outputs vs the original: max |error| / tolerance {worst:.3g}")


def quantized_tensors(written: Any) -> set[str]:
    """The activations the written INT8 model quantizes at run time (a QuantizeLinear's input; the quantiser
    renames a quantized node's own output `<name>_QuantizeLinear_Input`). Only their ranges clip anything: a
    tensor between float ops (a Gelu's output feeding a MaxPool) has a calibrated range that is never applied."""
    suffix = "_QuantizeLinear_Input"
    return {n.input[0].removesuffix(suffix) for n in written.graph.node if n.op_type == "QuantizeLinear"}


def _tensor_rows(found: Calibration, uncovered: dict[str, float], options: CalibrateOptions, *,
                 quantized: set[str]) -> list[dict[str, Any]]:
    rows = []
    for name in found.names:
        f, h, c = found.first[name], found.hists[name], found.ranges[name]
        aside = found.bounds[name].set_aside
        absmax = max(abs(f.lowest), abs(f.highest))
        p9999 = _abs_quantile(h, 0.9999)
        ratio = absmax / p9999 if p9999 > 0 else (math.inf if absmax > 0 else 1.0)
        extremes = np.maximum(np.abs(f.sample_low), np.abs(f.sample_high))
        top = np.argsort(-extremes, kind="stable")[:3]
        excess = uncovered.get(name, 0.0) - c.clipped
        rows.append({"tensor": name, "low": c.low, "high": c.high, "method": c.method, "min": f.lowest,
                     "max": f.highest, "max_over_p9999": ratio, "kurtosis": h.kurtosis, "clipped": c.clipped,
                     "eval_outside": uncovered.get(name), "uncovered_excess": excess, "quantized": name in quantized,
                     "extreme_samples": [int(i) for i in top], "set_aside_samples": list(aside),
                     "outlier": bool(ratio >= options.outlier_ratio or aside)})
    return rows


def _task_figures(judged: Agreement) -> str:
    """The figures beside the agreement that a reader of this task looks at."""
    f = judged.figures
    if judged.task == "embedding":
        text = f"cosine mean {f['cosine_mean']:.4f}, worst {f['cosine_min']:.4f}"
        return text + (f", {f['neighbour_agreement']:.1%} of nearest neighbours kept" if "neighbour_agreement" in f
                       else "")
    if judged.task == "regression":
        return f"R² vs FP32 {f['r2']:.4f}, worst error {f['max_relative_error']:.3g} of the spread" \
            if f["r2"] is not None else "non-finite values"
    text = f"KL {f['kl_divergence']:.4g}; top-1 probability {-(f['confidence_drop'] or 0.0):+.3f} on average"
    return text + (f"; mIoU vs FP32 {f['miou']:.4f}" if "miou" in f else "")


def coverage_check(tensors: list[dict[str, Any]], limit: float) -> Check:
    """Warns when, on a tensor the INT8 model quantizes, more eval values fall outside its calibrated range than
    calibration values did, by more than `limit`: serving data the ranges were not calibrated for. Tensors that
    stay in float are in the table, not judged; none quantized is a warning (nothing could be judged)."""
    judged = [t for t in tensors if t["quantized"]]
    if not judged:
        return Check("coverage", passed=False, severity="warn", value=None, limit=limit,
                     detail="no activation is quantized in the written model: no range to judge")
    worst = max(judged, key=lambda t: t["uncovered_excess"])
    return Check("coverage", passed=worst["uncovered_excess"] <= limit, severity="warn",
                 value=worst["uncovered_excess"], limit=limit,
                 detail=f"worst of {len(judged)} quantized tensors: {worst['tensor']}: "
                        f"{worst['eval_outside'] or 0:.2%} of eval values outside the calibrated range vs "
                        f"{worst['clipped']:.2%} of calibration values")


def _abs_quantile(hist: collect.Histogram, q: float) -> float:
    """|x| quantile from the histogram; values beyond its range count at its edges."""
    centres = np.abs(hist.centres)
    order = np.argsort(centres, kind="stable")
    index = int(np.searchsorted(np.cumsum(hist.counts[order]), q * hist.total))
    if index >= len(order):  # the quantile lies among the values beyond the range
        return max(abs(hist.low), abs(hist.high))
    return float(centres[order][index])


def _checks(final: Evaluation, excluded: list[str], tensors: list[dict[str, Any]], trials: list[dict[str, Any]],
            int8_coverage: dict[str, Any], options: CalibrateOptions, *, seven_bit: bool) -> list[Check]:
    judged = final.worst
    assert judged is not None  # every output has a task (common/output_tasks.py)
    harmed = f"share of positions harmed ({judged.harm}, {judged.task})"
    measure = "accuracy drop" if final.accuracy_fp32 is not None else harmed
    kept = f"; kept in FP32: {', '.join(excluded)}" if excluded else ""
    kept += "; 7-bit weights (reduce_range)" if seven_bit else ""
    detail = f"{measure} {final.drop:.4f} of the written file as deployed, after {len(trials)} trial(s){kept}"
    if final.accuracy_fp32 is not None:
        detail += f" (FP32 {final.accuracy_fp32:.4f}, INT8 {final.accuracy_int8:.4f})"
    if "kl_divergence" in final.logits:
        detail += f"; KL {final.logits['kl_divergence']:.4g}"
    budget = options.budget()
    if not budget.met(final) and len(trials) > 1:
        detail += "; tried: " + "; ".join(f"{t['tried']} → {t['drop']:.4f}" for t in trials[1:])
    elif not budget.met(final):
        detail += "; nothing tried in FP32 (no candidate, or --max-fallback-layers 0)"
    checks = [Check("accuracy_drop", passed=final.drop <= options.max_accuracy_drop + 1e-9, value=final.drop,
                    limit=options.max_accuracy_drop, detail=detail)]
    # the limit `parity --int8` judges, from the same code (common/output_tasks.py), with what the eval set can
    # resolve stated as parity states it (common/resolution.py)
    checks.append(Check(judged.check, passed=judged.meets(options.min_top1_agreement),
                        value=judged.agreement, limit=options.min_top1_agreement,
                        detail=f"{judged.task}: {judged.positions - judged.harmed} of {judged.positions} positions "
                               f"kept ({judged.harm}: harmed); {_task_figures(judged)}; "
                               + describe_resolution(judged.harmed, judged.positions,
                                                     1.0 - options.min_top1_agreement)))
    checks.append(Check("int8_coverage", passed=int8_coverage["mac_share"] >= options.min_int8_mac_share,
                        severity="warn", value=int8_coverage["mac_share"], limit=options.min_int8_mac_share,
                        detail=describe(int8_coverage) + f" (limit {options.min_int8_mac_share:.0%})"))
    flagged = [t for t in tensors if t["outlier"]]
    checks.append(Check("outliers", passed=True, value=len(flagged), detail=(
        "outlier tensors (handled: set-aside samples never set a range): "
        + ", ".join(f"{t['tensor']} (max/p99.99 {t['max_over_p9999']:.0f}×)" for t in flagged[:8])
        if flagged else "no tensor has outliers")))
    checks.append(coverage_check(tensors, options.max_uncovered))
    return checks
