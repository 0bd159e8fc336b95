"""preprocess: run the training and the serving preprocessing on the same raw samples and compare.

Each callable is given as `module:function`, takes the raw array (samples first) and returns an array. Reports
per-channel mean/std of each stage's output, the SHA-256 chain (raw → train, raw → serve), the first differing
element, and determinism: each callable runs three times, and any difference means an augmentation (or other
randomness) is still active at inference.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from skewgate.common.compare import Tolerance, compare_close
from skewgate.common.errors import InputError
from skewgate.common.io import load_npz, sha256_file
from skewgate.common.tensor_stats import sha256_array, summarize
from skewgate.common.verdict import Check, Subject, Verdict

STEP = "preprocess"


@dataclass(frozen=True)
class PreprocessDetails:
    hash_chain: dict[str, str]  # raw → train, raw → serve: SHA-256 of each stage's output
    channels: dict[str, dict[str, list[float]]]  # stage → per-channel mean and std
    callables: dict[str, str]  # stage → module:function


def load_callable(spec: str) -> Callable[[np.ndarray], np.ndarray]:
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise InputError(spec, expected="module:function", found="no ':'")
    try:
        function = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise InputError(spec, expected="an importable callable", found=f"{type(err).__name__}: {err}") from err
    if not callable(function):
        raise InputError(spec, expected="a callable", found=type(function).__name__)
    return function


def _channel_stats(array: np.ndarray) -> dict[str, list[float]]:
    """Mean/std per channel (axis 1 for arrays of rank ≥ 2: NCHW images, or features of a table)."""
    if array.ndim < 2:
        return {"mean": [float(array.mean())], "std": [float(array.std())]}
    moved = np.moveaxis(array.astype(np.float64), 1, 0).reshape(array.shape[1], -1)
    return {"mean": moved.mean(axis=1).tolist(), "std": moved.std(axis=1).tolist()}


def preprocess_parity(*, train: str, serve: str, raw: str | Path, array: str | None = None,
                      tolerance: Tolerance | None = None) -> Verdict:
    arrays = load_npz(raw)
    name = array or next(iter(arrays))
    if name not in arrays:
        raise InputError(raw, field=name, expected="an array of raw samples", found=f"arrays {sorted(arrays)}")
    samples = arrays[name]
    outputs, checks = {}, []
    for label, spec in (("train", train), ("serve", serve)):
        function = load_callable(spec)
        runs = [np.asarray(function(samples.copy())) for _ in range(3)]
        digests = [sha256_array(r) for r in runs]
        same = len(set(digests)) == 1
        checks.append(Check(f"determinism.{label}", passed=same, value=float(same), limit=1.0,
                            detail="three runs bit-identical" if same else
                            f"{spec} gives different outputs on the same input: an augmentation or other "
                            "randomness is active at inference"))
        outputs[label] = runs[0]
    tol = tolerance or Tolerance.for_dtype(outputs["train"].dtype)
    closeness = compare_close(outputs["serve"], outputs["train"], tol)
    dtype_note = "" if outputs["serve"].dtype == outputs["train"].dtype else \
        f"; dtype {outputs['serve'].dtype} (serve) vs {outputs['train'].dtype} (train)"
    first = ""
    if closeness.first_mismatch is not None:
        index = closeness.first_mismatch
        first = (f"; first difference at {list(index)}: train {outputs['train'][index]!r}, serve "
                 f"{outputs['serve'][index]!r}")
    checks.append(Check("preprocess_match", passed=closeness.ok and not dtype_note, value=closeness.worst_ratio,
                        limit=1.0, detail=f"serve vs train: {closeness.describe()}{dtype_note}{first}"))
    details = PreprocessDetails(
        hash_chain={"raw": sha256_array(samples), "train": sha256_array(outputs["train"]),
                    "serve": sha256_array(outputs["serve"])},
        channels={label: _channel_stats(out) for label, out in outputs.items()},
        callables={"train": train, "serve": serve},
    )
    stats = [summarize(name, "raw", samples)] + [summarize(name, f"{label}.output", out)
                                                 for label, out in outputs.items()]
    subject = Subject(artifact=str(raw), sha256=sha256_file(raw), data={"raw": sha256_file(raw)})
    return Verdict.from_checks(STEP, checks, subject=subject, stats=stats, details=details)
