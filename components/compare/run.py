"""The one entry the CLI and the KFP component call: fetch the champion from the registry (matched to its
evidence), judge the candidate against it, and publish the champion-vs-candidate table."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast, get_args

from skewgate.common.errors import InputError
from skewgate.common.publishing import publish, write_text
from skewgate.common.verdict import Verdict
from skewgate.compare.core import Champion, Judging, TaskChoice, Threshold, compare
from skewgate.compare.report import comparison_markdown

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

# A statistically clear drop of half a point of accuracy or macro-F1, or of 2% in MAE/RMSE, blocks by default;
# floors are the user's to set (they depend on the problem).
DEFAULT_THRESHOLDS: dict[str, Threshold] = {
    "accuracy": Threshold(max_regression=0.005),
    "macro_f1": Threshold(max_regression=0.005),
    "mae": Threshold(max_relative_regression=0.02),
    "rmse": Threshold(max_relative_regression=0.02),
}
THRESHOLD_FIELDS = tuple(f.name for f in dataclasses.fields(Threshold))


@dataclass(frozen=True)
class CompareOptions:
    alias: str = "champion"
    task: TaskChoice = "auto"
    output: str | None = None  # graph output to judge (default: the first)
    slice_key: str = "slices"  # eval array naming each sample's slice; judged per slice when present
    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 0
    max_churn: float | None = None  # None: churn is reported, not gated
    min_slice_size: int = 30  # smaller slices are listed but not judged (their intervals say nothing)
    max_slices: int = 50

    def judging(self) -> Judging:
        if not 0.5 <= self.confidence < 1:
            raise InputError("confidence", expected="a level in [0.5, 1)", found=str(self.confidence))
        if self.resamples < 100:
            raise InputError("resamples", expected="at least 100 bootstrap resamples", found=str(self.resamples))
        return Judging(thresholds=self.thresholds, confidence=self.confidence, resamples=self.resamples,
                       seed=self.seed, max_churn=self.max_churn, min_slice_size=self.min_slice_size)


def parse_thresholds(specs: list[str], *, base: Mapping[str, Threshold] | None = None) -> dict[str, Threshold]:
    """`METRIC:FIELD=VALUE[,FIELD=VALUE]` items (`;`-separated or one per spec) over `base` (the defaults);
    VALUE `none` removes a limit. Example: `accuracy:floor=0.9,max_regression=0.01;mae:max_relative_regression=0.05`."""
    result = dict(DEFAULT_THRESHOLDS if base is None else base)
    for item in (part.strip() for spec in specs for part in spec.split(";")):
        if not item:
            continue
        metric, _, assignments = item.partition(":")
        if metric not in DEFAULT_THRESHOLDS or not assignments:
            raise InputError("thresholds", field=item, expected=f"METRIC:FIELD=VALUE with METRIC one of "
                             f"{sorted(DEFAULT_THRESHOLDS)}", found=repr(item))
        changes: dict[str, float | None] = {}
        for assignment in assignments.split(","):
            name, _, text = assignment.strip().partition("=")
            if name not in THRESHOLD_FIELDS:
                raise InputError("thresholds", field=item, expected=f"a field among {THRESHOLD_FIELDS}",
                                 found=repr(name))
            try:
                changes[name] = None if text.strip().lower() == "none" else float(text)
            except ValueError as err:
                raise InputError("thresholds", field=item, expected="a number or `none`", found=repr(text)) from err
        result[metric] = dataclasses.replace(result.get(metric, Threshold()), **changes)
    return result


def options_from_parameters(*, alias: str, task: str, thresholds: str, confidence: float,
                            max_churn: float) -> CompareOptions:
    """Options from pipeline parameters (plain strings and numbers); `max_churn` < 0 means not gated."""
    choices = get_args(TaskChoice)
    if task not in choices:
        raise InputError("task", expected=f"one of {choices}", found=repr(task))
    return CompareOptions(alias=alias, task=cast(TaskChoice, task), thresholds=parse_thresholds([thresholds]),
                          confidence=confidence, max_churn=max_churn if max_churn >= 0 else None)


def run_compare(run: StepRun | None, *, onnx: str | Path, model_name: str, eval_data: str | Path,
                labels: str | Path | None = None, options: CompareOptions | None = None,
                markdown: str | Path | None = None) -> Verdict:
    """Judge `onnx` against the `options.alias` version of `model_name`; write the table to `markdown`."""
    from skewgate.common.mlflow_log import fetch_registered_onnx

    options = options or CompareOptions()
    judging = options.judging()
    if run is None:
        raise InputError("--tracking-uri", expected="an MLflow tracking URI (the champion lives in the registry)",
                         found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
    with tempfile.TemporaryDirectory() as tmp:
        registered = fetch_registered_onnx(run.tracking, model_name, options.alias, Path(tmp))
        champion = None if registered is None else Champion(
            path=registered.path, sha256=registered.sha256,
            label=f"{model_name}@{options.alias} (version {registered.version})")
        verdict = compare(candidate=onnx, champion=champion, eval_data=eval_data, labels=labels, task=options.task,
                          output=options.output, slice_key=options.slice_key, max_slices=options.max_slices,
                          judging=judging)
        if registered is not None:
            tags = {"skewgate.compare.champion_version": registered.version,
                    "skewgate.compare.champion_sha256": registered.sha256}
            verdict = dataclasses.replace(verdict, registry_tags=tags,
                                          details={**verdict.details, "champion_version": registered.version})
        # the table always reaches MLflow as comparison.md, and `markdown` too when asked (the KFP UI's output)
        final = verdict
        publish(run, tables={"comparison.json": list(verdict.details["table"])},
                outputs=[(markdown or Path(tmp) / "comparison.md", "comparison.md",
                          write_text(lambda: comparison_markdown(final)))])
    return verdict
