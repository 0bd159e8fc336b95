"""Label-free performance estimation: a pure function over paths that returns a `Verdict`.

The model runs in ONNX Runtime on a labelled reference (its eval set) and on unlabelled current data (serving).
Its scores are calibrated on the reference (`method.calibration`; `fit_reference`), or the calibration comes
from an estimate profile of the same model (`method.profile`: what a champion carries, so a night needs no
labels), and the metric the current data's labels would
realise is estimated with an interval (`method.confusion`). The check `performance.estimated_drop` fails when the
whole interval lies more than `max_drop` below the reference's realised metric, warns when the interval straddles
that line, and passes when the interval stays above it. The estimate assumes no concept shift; the verdict says so,
and warns when current scores lie outside what the reference calibrated (there the calibration extrapolates).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, get_args

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import load_labels, sha256_file
from skewgate.common.snapshot import relative_name, root_of
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, Verdict
from skewgate.estimate.data.batches import Inputs
from skewgate.estimate.data.scoring import Scorer
from skewgate.estimate.method.calibration import Reference, check_labels, unseen_classes
from skewgate.estimate.method.confusion import (
    METRICS,
    Metric,
    Tally,
    confusion_of,
    expected_calibration_error,
    metric_of,
    reliability,
)
from skewgate.estimate.method.partial import CurrentTally, merge_partials, save_partial
from skewgate.estimate.method.profile import ReferenceFit, load_profile, save_profile

STEP = "estimate"
METHOD = ("CBPE (confidence-based performance estimation): per-class isotonic calibration of the scores on the "
          "labelled reference, the expected confusion matrix on the current data")
METHOD_REFERENCE = "NannyML, CBPE: https://nannyml.readthedocs.io/en/stable/how_it_works/performance_estimation.html"
ASSUMPTION = ("no concept shift: P(label | scores) on the current data is the reference's; a change in what the "
              "labels mean, or a shift into scores the reference never produced, is not seen by the estimate")


@dataclass(frozen=True, kw_only=True)
class EstimateOptions:
    """Every default of `skewgate estimate` and `estimate_op` lives here."""

    metric: Metric = "accuracy"  # the metric judged (both are estimated and reported)
    max_drop: float = 0.02  # the largest fall below the reference's realised metric the interval may show
    confidence: float = 0.95  # of the interval
    resamples: int = 200  # bootstrap calibrations behind the interval
    seed: int = 0
    folds: int = 5  # of the out-of-fold reliability (ECE) on the reference
    max_extrapolated: float = 0.05  # share of current samples scored outside the reference's range (a warning)
    # beyond this share the drop is not judged (it fails): the estimate is then mostly the calibration's edge value
    max_extrapolated_judged: float = 0.25
    output: str | None = None  # graph output holding the scores (default: the first)
    labels_key: str = "labels"  # the reference's array (or column) of labels, unless a labels .npy is given
    features: tuple[str, ...] = ()  # Parquet/CSV columns that are the model's input, in order
    batch_rows: int = 65_536  # samples per ONNX Runtime run and per table batch (memory, not judging)

    def check(self) -> None:
        """`InputError` for a value no estimate can be made with."""
        if self.metric not in get_args(Metric):
            raise InputError("metric", expected=f"one of {list(get_args(Metric))}", found=repr(self.metric))
        if not 0.5 <= self.confidence < 1:
            raise InputError("confidence", expected="a level in [0.5, 1)", found=str(self.confidence))
        if self.resamples < 100:
            raise InputError("resamples", expected="at least 100 bootstrap calibrations", found=str(self.resamples))
        if not 0 <= self.max_drop < 1:
            raise InputError("max_drop", expected="a share in [0, 1)", found=str(self.max_drop))
        if not 0 <= self.max_extrapolated <= self.max_extrapolated_judged <= 1:
            raise InputError("max_extrapolated/max_extrapolated_judged", expected="shares with 0 ≤ max_extrapolated "
                             "≤ max_extrapolated_judged ≤ 1",
                             found=f"{self.max_extrapolated}, {self.max_extrapolated_judged}")
        if self.folds < 2 or self.batch_rows < 1:
            raise InputError("folds" if self.folds < 2 else "batch_rows", expected="folds ≥ 2 and batch_rows ≥ 1",
                             found=f"folds {self.folds}, batch_rows {self.batch_rows}")


def feature_columns(text: str) -> tuple[str, ...]:
    """`score, income` → ("score", "income"): how the CLI and the components spell `features`."""
    return tuple(f.strip() for f in text.split(",") if f.strip())


@dataclass(frozen=True)
class EstimateDetails:
    """estimate's `details`: the judged metric's figures first, then both metrics per row of `table`, then the
    evidence about the estimate itself (its calibration on the reference, where it extrapolates)."""

    metric: Metric
    reference_samples: int
    current_samples: int
    reference_accuracy: float
    estimated_accuracy: float | None  # None: no current sample had finite scores (the verdict fails)
    estimated_interval: list[float] | None
    confidence: float
    table: list[dict[str, Any]]
    reference_ece: float  # of the calibrated probabilities, out of fold
    uncalibrated_ece: float  # of the model's own scores
    reference_out_of_fold_accuracy: float  # the method's estimate on the reference itself, out of fold
    extrapolated_share: float
    reliability: list[dict[str, float]]
    current_confidence: list[int]  # current samples per bin of calibrated top-1 confidence (the reliability bins)
    method: str = METHOD
    method_reference: str = METHOD_REFERENCE
    assumes: str = ASSUMPTION
    unseen_classes: list[int] | None = field(default=None, metadata=OMIT_IF_NONE)
    profile: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)  # the fit came from this profile


def estimate(*, onnx: str | Path, current: str | Path, options: EstimateOptions, reference: str | Path | None = None,
             labels: str | Path | None = None, profile: str | Path | None = None,
             profile_out: str | Path | None = None, current_labels: str | Path | None = None,
             partials: Sequence[str | Path] = ()) -> Verdict:
    """Estimate `options.metric` of `onnx` on `current` and judge the drop, from its calibration on `reference`
    (labels from `labels`, or the reference's `options.labels_key` array or column) or from an estimate `profile`
    of this model (no labels needed; its fit settings replace `options`' in what the verdict records). With
    `profile_out`, the fit is saved there as a profile. With `current_labels` (they arrived for a past night), the
    metrics they realise stand beside the estimates: the estimator's track record. With `partials` (a profile's
    estimate only), the shards' counts (`tally_shard`) stand for reading `current`, whose files they must cover
    once each. The verdict is judged with the settings in force."""
    options.check()
    if (reference is None) == (profile is None):
        raise InputError("reference/profile", expected="exactly one: labelled reference data or an estimate "
                         "profile", found="both" if reference is not None else "neither")
    tallied = None
    if profile is not None:
        scorer, fit, options = _from_profile(onnx, profile, options)
        data = {"profile": sha256_file(profile)}
        if partials:
            tallied = _merged(scorer, fit, partials, current=current, options=options, profile_sha256=data["profile"],
                              labelled=current_labels is not None)
    else:
        assert reference is not None
        if partials:
            raise InputError("partials", expected="shards tallied under an estimate profile", found="a reference")
        scorer = Scorer.load(onnx, options.output)
        fit = fit_reference(scorer, reference=reference, labels=labels, options=options)
        data = dict(fit.data)
    if profile_out is not None:
        save_profile(fit, profile_out)
    return judge(scorer, fit, current=current, options=options, data=data, current_labels=current_labels,
                 profile={"sha256": data["profile"], "fit_on": fit.data} if profile is not None else None,
                 tallied=tallied).judged_with(options)


def tally_shard(*, onnx: str | Path, profile: str | Path, current: str | Path, shard: int, shards: int,
                options: EstimateOptions, out: str | Path) -> Path:
    """Shard `shard` of `shards` of the nightly fan-out: the counts of files `shard`, `shard + shards`, … of the
    `current` snapshot under `profile`, saved at `out` for `estimate(partials=…)`."""
    if not 0 <= shard < shards:
        raise InputError("shard", expected=f"an index in [0, {shards})", found=str(shard))
    options.check()
    scorer, fit, options = _from_profile(onnx, profile, options)
    files = scorer.inputs(current, features=options.features, batch_rows=options.batch_rows).listed()[1]
    mine = files[shard::shards]
    tallied = (tally_current(scorer, fit, current=current, options=options, files=mine) if mine
               else CurrentTally.empty(fit))
    return save_partial(tallied, out, model_sha256=scorer.sha256, profile_sha256=sha256_file(profile),
                        files=_rows_by_name(tallied.rows, _names(mine, current)))


def _from_profile(onnx: str | Path, profile: str | Path,
                  options: EstimateOptions) -> tuple[Scorer, ReferenceFit, EstimateOptions]:
    """The model's scorer and the profile's fit, checked to belong together; the options with the fit's
    settings, held to what options from the command line would be."""
    fit = load_profile(profile)
    if options.output not in (None, fit.output):
        raise InputError(profile, field="output", expected=f"the output the profile calibrated "
                         f"({fit.output!r})", found=repr(options.output))
    scorer = Scorer.load(onnx, fit.output)
    if fit.model_sha256 != scorer.sha256:
        raise InputError(profile, field="model_sha256", expected=f"{scorer.sha256} (the SHA-256 of {onnx}: a "
                         "profile calibrates one model's scores)", found=fit.model_sha256)
    options = replace(options, resamples=fit.resamples, seed=fit.seed, folds=fit.folds)
    try:
        options.check()
    except InputError as err:
        raise InputError(profile, field=f"header.{err.source}", expected=err.expected, found=err.found) from err
    return scorer, fit, options


def _merged(scorer: Scorer, fit: ReferenceFit, partials: Sequence[str | Path], *, current: str | Path,
            options: EstimateOptions, profile_sha256: str, labelled: bool) -> CurrentTally:
    """The shards' counts added up, once it is sure they read every file of `current` once."""
    if labelled:
        raise InputError("current_labels", expected="labels beside one pass over the snapshot (each sample's "
                         "prediction is needed)", found="labels with shards' partials")
    inputs = scorer.inputs(current, features=options.features, batch_rows=options.batch_rows)
    return merge_partials(partials, fit, model_sha256=scorer.sha256, profile_sha256=profile_sha256,
                          snapshot=_rows_by_name(inputs.row_counts(), _names(inputs.listed()[1], current)),
                          source=str(current))


def _names(files: Sequence[str], current: str | Path) -> list[str]:
    """The snapshot's files by their names under its root: what every task that lists it agrees on, wherever
    its pod mounted the snapshot."""
    root = root_of(str(current))
    return [relative_name(path, root) for path in files]


def _rows_by_name(per_origin: Mapping[str, int], names: Sequence[str]) -> dict[str, int]:
    """Rows per file under the snapshot's `names`, from rows counted per origin (a snapshot's file by the same
    name; one file as "", which its one name stands for); a file no row came from has 0."""
    single = per_origin.get("", 0) if len(names) == 1 else 0
    return {name: per_origin.get(name, 0) + single for name in names}


def fit_reference(scorer: Scorer, *, reference: str | Path, labels: str | Path | None,
                  options: EstimateOptions) -> ReferenceFit:
    """The calibration of `scorer`'s scores on the labelled `reference` and its resamples, the reference's
    realised metrics and the calibration's reliability (out of fold)."""
    inputs = scorer.inputs(reference, features=options.features, batch_rows=options.batch_rows)
    scores = np.concatenate([batch for _, batch in scorer.scores(inputs)])
    if not np.isfinite(scores).all():
        raise InputError(reference, expected="finite model scores on every reference sample (the calibration is "
                         "fit on them)", found=f"{int((~np.isfinite(scores)).any(axis=1).sum())} samples with "
                                               "NaN/Inf scores")
    truth, labels_sha = _labels(labels, inputs, options.labels_key, scores)
    fitted = Reference(scores, truth)
    realised = confusion_of(truth, scores.argmax(axis=1), fitted.classes)
    out_of_fold = fitted.out_of_fold(folds=options.folds, seed=options.seed)
    oof_confusion = out_of_fold.T @ np.eye(fitted.classes)[scores.argmax(axis=1)]
    return ReferenceFit(
        calibration=fitted.fit(), samples=fitted.samples,
        resampled=tuple(fitted.resampled(resamples=options.resamples, seed=options.seed)),
        realised={m: float(metric_of(realised, m)) for m in METRICS},
        score_low=scores.min(axis=0), score_high=scores.max(axis=0),
        reference_ece=expected_calibration_error(out_of_fold, truth),
        uncalibrated_ece=expected_calibration_error(scores, truth),
        out_of_fold_accuracy=float(metric_of(oof_confusion, "accuracy")),
        reliability=reliability(out_of_fold, truth), unseen_classes=unseen_classes(truth, fitted.classes),
        resamples=options.resamples, seed=options.seed, folds=options.folds, model_sha256=scorer.sha256,
        output=scorer.output, normalised=scorer.normalised,
        data={"reference": inputs.sha256(), **({"labels": labels_sha} if labels_sha else {})})


def tally_current(scorer: Scorer, fit: ReferenceFit, *, current: str | Path, options: EstimateOptions,
                  files: Sequence[str] = (), predictions: bool = False) -> CurrentTally:
    """The current data's scores under `fit`, batch by batch; `files`: only these of the snapshot's (a shard);
    `predictions`: keep each sample's predicted class (for labels read beside the estimate)."""
    tallied = CurrentTally.empty(fit)
    inputs = scorer.inputs(current, features=options.features, batch_rows=options.batch_rows, files=files)
    for origin, batch in scorer.scores(inputs):
        tallied.rows[origin] = tallied.rows.get(origin, 0) + len(batch)
        if batch.shape[1] != fit.classes:
            raise InputError(scorer.path, field=scorer.output, expected=f"{fit.classes} classes (the reference's)",
                             found=f"{batch.shape[1]} on {current}")
        finite = np.isfinite(batch).all(axis=1)
        if predictions:
            tallied.predicted.append(np.where(finite, np.nan_to_num(batch).argmax(axis=1), -1))
        tallied.non_finite += int((~finite).sum())
        batch = batch[finite]
        tallied.extrapolated += int(_outside(batch, fit.score_low, fit.score_high).sum())
        tallied.tally.add(batch, origin=origin)
    return tallied


def judge(scorer: Scorer, fit: ReferenceFit, *, current: str | Path, options: EstimateOptions,
          data: dict[str, str], profile: dict[str, Any] | None = None,
          current_labels: str | Path | None = None, tallied: CurrentTally | None = None) -> Verdict:
    """The estimate on `current` under `fit`, tallied batch by batch (or `tallied` already: the shards' merged
    counts), and its checks; `data`: the digests of what the reference side was read from (the verdict's
    subject adds the current data's); `profile`: the profile's digest and what it was fit on, when the fit came
    from one; `current_labels`: each table row adds the metric they realise (over the samples with finite scores,
    as the estimate) and whether the interval covered it."""
    if tallied is None:
        tallied = tally_current(scorer, fit, current=current, options=options,
                                predictions=current_labels is not None)
    tally, non_finite, extrapolated = tallied.tally, tallied.non_finite, tallied.extrapolated
    if tallied.samples == 0:
        raise InputError(current, expected="at least one current sample", found="0 samples")
    table: list[dict[str, Any]] = [_row(m, fit.realised[m], tally, options.confidence) for m in METRICS]
    if current_labels is not None and tally.samples:
        data = {**data, "current_labels": sha256_file(current_labels)}
        _add_realised(table, current_labels, np.concatenate(tallied.predicted), fit.classes)
    share = extrapolated / tally.samples if tally.samples else 0.0
    judged = next(row for row in table if row["metric"] == options.metric)
    checks = [_finite(non_finite, tally.samples + non_finite)]
    if tally.samples:
        checks += [_drop(judged, options, extrapolated=share), _extrapolation(share, options.max_extrapolated)]
    accuracy = table[0]
    details = EstimateDetails(
        metric=options.metric, reference_samples=fit.samples, current_samples=tally.samples + non_finite,
        reference_accuracy=accuracy["reference"], estimated_accuracy=accuracy.get("estimated"),
        estimated_interval=[accuracy["low"], accuracy["high"]] if tally.samples else None,
        confidence=options.confidence, table=table, reference_ece=fit.reference_ece,
        uncalibrated_ece=fit.uncalibrated_ece, reference_out_of_fold_accuracy=fit.out_of_fold_accuracy,
        extrapolated_share=share, reliability=fit.reliability, current_confidence=tally.confidence_counts.tolist(),
        unseen_classes=fit.unseen_classes or None, profile=profile)
    current_sha = scorer.inputs(current, features=options.features, batch_rows=options.batch_rows).sha256()
    subject = Subject(artifact=str(scorer.path), sha256=scorer.sha256, data={**data, "current": current_sha})
    return Verdict.from_checks(STEP, checks, subject=subject, details=details)


def _labels(labels: str | Path | None, reference: Inputs, key: str, scores: np.ndarray) -> tuple[np.ndarray, str]:
    """The reference's labels, checked against its samples and the output's classes; their file's SHA-256 when
    they came from a file of their own."""
    if labels is None:
        values, source, field_name, sha = reference.column(key), str(reference.path), key, ""
    else:
        path = Path(labels)
        values = load_labels(path)
        source, field_name, sha = str(path), None, sha256_file(path)
    truth = check_labels(values, scores.shape[1], source=source, field=field_name)
    if len(truth) != len(scores):
        raise InputError(source, field=field_name, expected=f"one label per reference sample: {len(scores)}",
                         found=f"{len(truth)} labels")
    return truth, sha


def _add_realised(table: list[dict[str, Any]], path: str | Path, predicted: np.ndarray, classes: int) -> None:
    truth = check_labels(load_labels(Path(path)), classes, source=str(path), field=None)
    if len(truth) != len(predicted):
        raise InputError(path, expected=f"one label per current sample: {len(predicted)}",
                         found=f"{len(truth)} labels")
    scored = predicted >= 0
    confusion = confusion_of(truth[scored], predicted[scored], classes)
    for row in table:
        row["realised"] = float(metric_of(confusion, row["metric"]))
        row["covered"] = bool(row["low"] <= row["realised"] <= row["high"])


def _outside(scores: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Samples whose predicted class's score lies outside the reference's range of that class's score."""
    predicted = scores.argmax(axis=1)
    mine = scores[np.arange(len(scores)), predicted]
    return (mine < low[predicted]) | (mine > high[predicted])


def _row(metric: Metric, reference: float, tally: Tally, confidence: float) -> dict[str, Any]:
    if not tally.samples:
        return {"metric": metric, "reference": reference}
    low, high = tally.interval(metric, confidence=confidence)
    return {"metric": metric, "reference": reference, "estimated": tally.estimate(metric), "low": low, "high": high,
            "drop": reference - tally.estimate(metric)}


def _finite(bad: int, total: int) -> Check:
    return Check("current.scores_finite", passed=bad == 0, value=bad, limit=0,
                 detail=f"{bad} of {total} current samples have NaN/Inf scores (not estimable)" if bad
                 else f"all {total} current samples have finite scores")


def _drop(row: dict[str, Any], options: EstimateOptions, *, extrapolated: float) -> Check:
    """Fails when even the interval's top lies more than `max_drop` below the reference; warns when only its
    bottom does. The value is the smallest drop the interval admits (what failing needs to exceed). Not judged
    (a failure, with no value: none was held against the limit) when more than `max_extrapolated_judged` of the
    samples lie outside the calibrated range: there every sample gets the calibration's edge value whatever its
    label would be, so the interval says nothing (data read ×16 by a serving bug scores 0.99 while its labels
    realise 0.82)."""
    metric, reference, low, high = row["metric"], row["reference"], row["low"], row["high"]
    line = reference - options.max_drop
    smallest, largest = reference - high, reference - low
    text = (f"estimated {metric} {row['estimated']:.4f}, {options.confidence:.0%} interval [{low:.4f}, {high:.4f}], "
            f"reference {reference:.4f}: ")
    if extrapolated > options.max_extrapolated_judged:  # no figure: the drop was not judged against its limit
        return Check("performance.estimated_drop", passed=False,
                     detail=f"not judged: {extrapolated:.2%} of current samples score outside the range the "
                            f"reference calibrated (at most {options.max_extrapolated_judged:.2%} can be judged); "
                            + text.rstrip(": ") + " rests on the calibration's edge values, not on evidence")
    if smallest > options.max_drop:
        return Check("performance.estimated_drop", passed=False, value=smallest, limit=options.max_drop,
                     detail=text + f"the whole interval lies more than {options.max_drop:.4g} below the reference")
    if largest > options.max_drop:
        return Check("performance.estimated_drop", passed=False, value=smallest, limit=options.max_drop,
                     severity="warn", detail=text + f"the interval straddles {line:.4f} (a drop of "
                                                    f"{options.max_drop:.4g}): more current data would decide")
    return Check("performance.estimated_drop", passed=True, value=smallest, limit=options.max_drop,
                 detail=text + f"the interval stays within {options.max_drop:.4g} of the reference")


def _extrapolation(share: float, limit: float) -> Check:
    return Check("calibration.extrapolated", passed=share <= limit, value=share, limit=limit, severity="warn",
                 detail=f"{share:.2%} of current samples have a predicted-class score outside the reference's range "
                        f"(the calibration is flat there, the estimate less reliable; at most {limit:.2%})")
