"""The one entry the CLI and the KFP component call: fetch the champion from the registry, judge the candidate
against it (its file matched to its evidence), and publish the champion-vs-candidate table (Markdown, escaped)."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

from skewgate.common import markdown
from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.publishing import publish, write_text
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.verdict import Verdict
from skewgate.compare.core import STEP, Judging, TaskChoice, Threshold, compare

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

# A statistically clear drop of half a point of a share (accuracy, macro-F1, pixel accuracy, mIoU, retrieval), or
# of 2% in MAE/RMSE, blocks by default; floors are the user's to set (they depend on the problem).
DEFAULT_THRESHOLDS: dict[str, Threshold] = {
    "accuracy": Threshold(max_regression=0.005),
    "macro_f1": Threshold(max_regression=0.005),
    "pixel_accuracy": Threshold(max_regression=0.005),
    "miou": Threshold(max_regression=0.005),
    "nn_accuracy": Threshold(max_regression=0.005),
    "recall_at_k": Threshold(max_regression=0.005),
    "mae": Threshold(max_relative_regression=0.02),
    "rmse": Threshold(max_relative_regression=0.02),
}
THRESHOLD_FIELDS = tuple(f.name for f in dataclasses.fields(Threshold))


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """Every default of `skewgate compare` and `compare_op` lives here."""

    alias: str = DEFAULT_ALIAS
    task: TaskChoice = "auto"
    output: str | None = None  # graph output to judge (default: the first)
    slice_key: str = "slices"  # eval array naming each sample's slice; judged per slice when present
    labels_key: str = "labels"  # eval array holding the labels (unless a labels .npy is given)
    thresholds: Mapping[str, Threshold] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    # `METRIC:FIELD=VALUE[,…]` changes over `thresholds`, as the user spelled them: read when judging starts, so
    # that a bad one is an `error` verdict recorded like any other bad input
    threshold_specs: tuple[str, ...] = ()
    confidence: float = 0.95
    resamples: int = 1000
    seed: int = 0
    max_churn: float | None = None  # None: churn is reported, not gated
    min_slice_size: int = 30  # smaller slices are listed but not judged (their intervals say nothing)
    max_slices: int = 50

    def judged_settings(self) -> dict[str, Any]:
        """What a verdict says it was judged with (`Verdict.judged_with`): these options, with the thresholds in
        force (the defaults changed by `threshold_specs`), so that a policy bounds the limit actually applied."""
        settings = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        with contextlib.suppress(InputError):  # judging refuses them too: an error verdict, the specs as typed
            settings["thresholds"] = parse_thresholds(list(self.threshold_specs), base=self.thresholds)
        return settings

    def judging(self) -> Judging:
        """The judging parameters, validated (`InputError` for bad ones)."""
        choices = get_args(TaskChoice)
        if self.task not in choices:
            raise InputError("task", expected=f"one of {choices}", found=repr(self.task))
        if not 0.5 <= self.confidence < 1:
            raise InputError("confidence", expected="a level in [0.5, 1)", found=str(self.confidence))
        if self.max_churn is not None and not 0 <= self.max_churn <= 1:
            raise InputError("max_churn", expected="a share in [0, 1] (or not set: reported, not gated)",
                             found=str(self.max_churn))
        if self.resamples < 100:
            raise InputError("resamples", expected="at least 100 bootstrap resamples", found=str(self.resamples))
        thresholds = parse_thresholds(list(self.threshold_specs), base=self.thresholds)
        return Judging(thresholds=thresholds, confidence=self.confidence, resamples=self.resamples,
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
                            max_churn: str, labels_key: str = "labels") -> CompareOptions:
    """Options from pipeline parameters (plain strings and numbers; `judging()` validates them); `thresholds` as
    `--threshold`, `;`-separated; `max_churn` a share, empty for not gated (a blank field in the run form: no
    number stands for "not set")."""
    try:
        churn = float(max_churn) if max_churn.strip() else None
    except ValueError as err:
        raise InputError("max_churn", expected="a share in [0, 1], or empty (reported, not gated)",
                         found=repr(max_churn)) from err
    return CompareOptions(alias=alias, task=cast(TaskChoice, task),
                          threshold_specs=(thresholds,) if thresholds else (), confidence=confidence,
                          max_churn=churn, labels_key=labels_key)


def run(*, onnx: str | Path, model_name: str, eval_data: str | Path, options: CompareOptions,
        tracking: TrackingOptions, labels: str | Path | None = None, markdown: str | Path | None = None) -> StepResult:
    """Judge `onnx` against the `options.alias` version of `model_name` inside the step's MLflow run (never
    raises: `error` verdict); the champion-vs-candidate table goes to MLflow, and to `markdown` when given."""

    def evaluate(step_run: object) -> Verdict:
        from skewgate.common.mlflow_log import StepRun

        return _judge_in_run(step_run if isinstance(step_run, StepRun) else None, onnx=onnx, model_name=model_name,
                             eval_data=eval_data, labels=labels, options=options, markdown=markdown
                             ).judged_with(options)

    return evaluate_and_record(STEP, evaluate, tracking, settings=options,
                               inputs={"onnx": onnx, "eval": eval_data, "labels": labels})


def _judge_in_run(run: StepRun | None, *, onnx: str | Path, model_name: str, eval_data: str | Path,
                  labels: str | Path | None, options: CompareOptions, markdown: str | Path | None) -> Verdict:
    from skewgate.common.mlflow_log import RegistryChampions

    judging = options.judging()
    if run is None:
        raise InputError("--tracking-uri", expected="an MLflow tracking URI (the champion lives in the registry)",
                         found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
    with tempfile.TemporaryDirectory() as tmp:
        registry = RegistryChampions.of(run.tracking)
        champion = registry.fetch(model_name, options.alias, Path(tmp))
        verdict = compare(candidate=onnx, champion=champion, eval_data=eval_data, labels=labels, task=options.task,
                          output=options.output, slice_key=options.slice_key, max_slices=options.max_slices,
                          judging=judging, labels_key=options.labels_key, registry=registry.identity,
                          model_name=model_name)
        if champion is not None:  # judged against: its file had the digest of its evidence
            verdict = dataclasses.replace(verdict, registry_tags={
                conv.COMPARE_CHAMPION_VERSION_TAG: champion.version,
                conv.COMPARE_CHAMPION_SHA_TAG: champion.sha256})
        # the table always reaches MLflow as comparison.md, and `markdown` too when asked (the KFP UI's output)
        final = verdict
        publish(run, tables={"comparison.json": list(verdict.details["table"])},
                outputs=[(markdown or Path(tmp) / "comparison.md", "comparison.md",
                          write_text(lambda: comparison_markdown(final)))])
    return verdict


def comparison_markdown(verdict: Verdict) -> str:
    details = verdict.details
    champion = details.get("champion")
    lines = [f"# compare: {verdict.status.upper()}", "", markdown.cell(verdict.message), "",
             f"Task: {markdown.cell(details.get('task'))}, {details.get('samples')} samples; champion: "
             + (markdown.cell(champion["label"]) if champion else "none (first promotion)"), "",
             "| slice | metric | champion | candidate | difference | interval | allowed regression | result |",
             "|---|---|---|---|---|---|---|---|"]
    confidence = details.get("confidence", 0.95)
    for row in details.get("table", []):
        interval = "" if "ci_low" not in row else f"[{row['ci_low']:+.4g}, {row['ci_high']:+.4g}]"
        result = "" if "passed" not in row else ("ok" if row["passed"] else "**blocked**")
        lines.append(f"| {markdown.cell(row['slice'])} | {row['metric']} | {_num(row.get('champion'))} "
                     f"| {_num(row['candidate'])} | {_num(row.get('difference'), sign=True)} | {interval} "
                     f"| {_num(row.get('allowed'))} | {result} |")
    lines.append(f"\nIntervals: paired bootstrap, {details.get('resamples')} resamples, {confidence:.0%}.")
    slices = details.get("slices")
    if slices:
        worst = slices.get("worst")
        if worst:
            lines.append(f"\nWorst slice: **{markdown.cell(worst['slice'])}** ({worst['metric']} "
                         f"{_num(worst['candidate'])}).")
        small = [s for s in slices["slices"] if not s["judged"]]
        if small:
            lines.append(f"\nNot judged (fewer than {slices['min_size']} samples): "
                         + ", ".join(f"{markdown.cell(s['slice'])} ({s['samples']})" for s in small))
    return "\n".join(lines) + "\n"


def _num(value: Any, *, sign: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:+.4g}" if sign else f"{value:.4g}"
