"""What the estimate needs of the labelled reference, fitted once: from the data (`fit_reference`, in core.py) or
from an estimate profile (`load_profile`), the file promote records with the champion so that a nightly run needs
no labels.

A profile is an `.npz` archive (no pickles): a JSON `header` with the figures and the fit's settings, and the
isotonic maps of the calibration on the whole reference followed by its bootstrap resamples, flattened into
`knots`, `values` and `offsets` (map m of calibration c is `knots[offsets[c·M + m]:offsets[c·M + m + 1]]`, M
maps per calibration). The loader refuses what it does not understand, naming the field.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.strict_json import Fields
from skewgate.estimate.method.calibration import Calibration, Isotonic
from skewgate.estimate.method.confusion import METRICS, Metric

SCHEMA, VERSION = "skewgate.estimate-profile", 1
ARRAYS = ("header", "knots", "values", "offsets", "score_low", "score_high")


@dataclass(frozen=True, kw_only=True)
class ReferenceFit:
    """The calibration (and its resamples), the reference's realised metrics and the evidence about the
    calibration, with what it was fit on and how."""

    calibration: Calibration
    resampled: tuple[Calibration, ...]
    samples: int
    realised: dict[Metric, float]
    score_low: np.ndarray  # per class: the lowest and highest score the reference produced (beyond: extrapolated)
    score_high: np.ndarray
    reference_ece: float  # of the calibrated probabilities, out of fold
    uncalibrated_ece: float
    out_of_fold_accuracy: float
    reliability: list[dict[str, float]]
    unseen_classes: list[int]
    resamples: int
    seed: int
    folds: int
    model_sha256: str  # the ONNX file whose scores were calibrated
    output: str
    normalised: bool
    data: dict[str, str]  # SHA-256 of the reference (and its labels file) it was fit on

    @property
    def classes(self) -> int:
        return self.calibration.classes


def save_profile(fit: ReferenceFit, path: str | Path) -> Path:
    path = Path(path)
    maps = [m for c in (fit.calibration, *fit.resampled) for m in c.maps]
    offsets = np.cumsum([0] + [len(m.knots) for m in maps])
    header = {"schema": SCHEMA, "version": VERSION, "classes": fit.classes, "samples": fit.samples,
              "resamples": fit.resamples, "seed": fit.seed, "folds": fit.folds, "model_sha256": fit.model_sha256,
              "output": fit.output, "normalised": fit.normalised, "realised": dict(fit.realised),
              "reference_ece": fit.reference_ece, "uncalibrated_ece": fit.uncalibrated_ece,
              "out_of_fold_accuracy": fit.out_of_fold_accuracy, "reliability": fit.reliability,
              "unseen_classes": fit.unseen_classes, "data": fit.data}
    with path.open("wb") as handle:  # a handle: np.savez would otherwise append ".npz" to the name
        np.savez_compressed(handle, header=np.array(json.dumps(header)),
                            knots=np.concatenate([m.knots for m in maps]),
                            values=np.concatenate([m.values for m in maps]), offsets=offsets.astype(np.int64),
                            score_low=fit.score_low, score_high=fit.score_high)
    return path


def load_profile(path: str | Path) -> ReferenceFit:
    """The fit stored at `path`; `InputError` naming the field for anything that is not a well-formed profile of
    this version."""
    path = Path(path)
    source = str(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        header = json.loads(str(arrays["header"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(path, expected="a skewgate estimate profile (`skewgate estimate --profile-out`)",
                         found=f"{type(err).__name__}: {err}") from err
    top = Fields(header, source=source, where="header")
    if (header.get("schema"), header.get("version")) != (SCHEMA, VERSION):
        raise InputError(path, field="header.schema/version", expected=f"{SCHEMA} v{VERSION}",
                         found=f"{header.get('schema')} v{header.get('version')} (refit it with `skewgate "
                               "estimate --profile-out`)")
    top.string("schema"), top.integer("version")
    missing = sorted(set(ARRAYS) - set(arrays))
    if missing or set(arrays) - set(ARRAYS):
        raise InputError(path, field=(missing or sorted(set(arrays) - set(ARRAYS)))[0],
                         expected=f"exactly the arrays {list(ARRAYS)}", found=f"{sorted(arrays)}")
    classes, resamples = top.integer("classes"), top.integer("resamples")
    if classes < 2 or resamples < 1:
        raise InputError(path, field="header.classes" if classes < 2 else "header.resamples",
                         expected="at least 2 classes and 1 resample", found=f"{classes}, {resamples}")
    calibrations = _calibrations(path, arrays, classes=classes, count=1 + resamples)
    realised = top.json_object("realised")
    if sorted(realised) != sorted(METRICS) or not all(_share(v) for v in realised.values()):
        raise InputError(path, field="header.realised", expected=f"a share in [0, 1] for each of {list(METRICS)}",
                         found=repr(realised)[:120])
    low, high = (np.asarray(arrays[k], dtype=np.float64) for k in ("score_low", "score_high"))
    if low.shape != (classes,) or high.shape != (classes,) or not (low <= high).all():
        raise InputError(path, field="score_low/score_high", expected=f"{classes} ranges with low ≤ high",
                         found=f"shapes {list(low.shape)}, {list(high.shape)}")
    figures = {k: _number(top, k) for k in ("reference_ece", "uncalibrated_ece", "out_of_fold_accuracy")}
    reliability = [_reliability_row(row) for row in top.objects("reliability")]
    unseen = top.ints("unseen_classes")
    fit = ReferenceFit(
        calibration=calibrations[0], resampled=tuple(calibrations[1:]), samples=top.integer("samples"),
        realised={m: float(realised[m]) for m in METRICS}, score_low=low, score_high=high, **figures,
        reliability=reliability, unseen_classes=unseen, resamples=resamples, seed=top.integer("seed"),
        folds=top.integer("folds"), model_sha256=top.sha256("model_sha256"), output=top.string("output"),
        normalised=top.boolean("normalised"), data=top.str_map("data"))
    top.done()
    return fit


def _calibrations(path: Path, arrays: dict[str, np.ndarray], *, classes: int, count: int) -> list[Calibration]:
    per = 1 if classes == 2 else classes
    knots, values, offsets = arrays["knots"], arrays["values"], arrays["offsets"]
    if (offsets.ndim != 1 or len(offsets) != count * per + 1 or offsets.dtype.kind != "i" or offsets[0] != 0
            or (np.diff(offsets) < 1).any() or offsets[-1] != len(knots) or knots.shape != values.shape):
        raise InputError(path, field="offsets", expected=f"{count * per + 1} increasing offsets into "
                         f"{len(knots)} knots and as many values", found=f"shape {list(offsets.shape)}")
    maps: list[Isotonic] = []
    for start, end in itertools.pairwise(offsets):
        k, v = knots[start:end].astype(np.float64), values[start:end].astype(np.float64)
        if (np.diff(k) <= 0).any() or (np.diff(v) < 0).any() or not (np.isfinite(k).all() and _share(v)):
            raise InputError(path, field="knots/values", expected="increasing finite knots, non-decreasing "
                             "probabilities in [0, 1] per map", found=f"map {len(maps)} breaks it")
        maps.append(Isotonic(k, v))
    return [Calibration(maps=tuple(maps[c * per:(c + 1) * per]), classes=classes) for c in range(count)]


def _share(value: Any) -> bool:
    array = np.asarray(value, dtype=np.float64) if not isinstance(value, bool) else np.asarray(np.nan)
    return bool(np.isfinite(array).all() and (array >= 0).all() and (array <= 1).all())


def _number(top: Fields, key: str) -> float:
    value = top.optional_number(key)
    if value is None:
        raise InputError(top.source, field=f"{top.where}.{key}", expected="a finite number", found="null")
    return value


def _reliability_row(row: Fields) -> dict[str, float]:
    values = {k: _number(row, k) for k in ("low", "high", "confidence", "accuracy")}
    found = {**values, "samples": row.integer("samples")}
    row.done()
    return found
