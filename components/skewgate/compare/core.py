"""Champion vs candidate on the same labelled eval set: a pure function over paths that returns a `Verdict`.

Both ONNX files run in ONNX Runtime on the same inputs. Per metric (accuracy and macro-F1 for classifiers, pixel
accuracy and mIoU for segmentation, nearest-neighbour accuracy and recall@k for embeddings, MAE and RMSE for
regression outputs): an optional absolute floor, and a maximum regression versus the champion (absolute and
relative, as MLflow's `MetricThreshold`) called only when the whole paired-bootstrap interval of the difference
lies beyond it. Churn (the share of answers that change: a top-1, a pixel's class, a nearest neighbour) is
reported and optionally gated.
With a `slices` array the same is judged per slice and the worst slice is named. No champion: `pass`, with a
check that says there was nothing to compare against. Of the champion's downloaded files, only the one that
matches its evidence digest is run (`onnx_file`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import InputError
from skewgate.common.io import load_labels, load_npz, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.output_tasks import unit_rows
from skewgate.common.registry import Champion
from skewgate.common.runtime import run_by_name, session
from skewgate.common.verdict import OMIT_IF_NONE, Check, Subject, Verdict
from skewgate.compare.scoring.metrics import (
    HIGHER_IS_BETTER,
    METRICS,
    Scorer,
    Task,
    classification_scorer,
    embedding_scorer,
    paired_intervals,
    point,
    regression_scorer,
    retrieval_neighbours,
    segmentation_scorer,
)

STEP = "compare"
TaskChoice = Literal["auto", "classification", "segmentation", "embedding", "regression"]
BATCH = 512


@dataclass(frozen=True)
class Threshold:
    """Limits for one metric. `floor` is a minimum for accuracy/macro-F1 and a maximum for MAE/RMSE; a
    regression versus the champion may be at most `max_regression` (absolute) and `max_relative_regression`
    (a share of the champion's value); each that is None is not applied."""

    floor: float | None = None
    max_regression: float | None = None
    max_relative_regression: float | None = None

    def allowed(self, champion_value: float) -> float:
        """The largest regression tolerated against a champion scoring `champion_value` (0 when none is set)."""
        limits = [] if self.max_regression is None else [self.max_regression]
        if self.max_relative_regression is not None:
            limits.append(self.max_relative_regression * abs(champion_value))
        return min(limits, default=0.0)


@dataclass(frozen=True)
class ChampionRecord:
    label: str
    sha256: str


@dataclass(frozen=True)
class CompareDetails:
    """compare's `details`. `table` holds one row per (slice, metric); `slices` the per-slice summary with the
    worst slice; `champion`, `champion_version` and `slices` are left out of the verdict when they do not apply
    (no champion, no slice array), as they always were. `registry` and `model_name` say where the champion was
    looked up (promote accepts the verdict only for that registry, model and champion version)."""

    task: Task
    samples: int
    metrics: list[str]
    confidence: float
    resamples: int
    table: list[dict[str, Any]]
    champion: ChampionRecord | None = field(default=None, metadata=OMIT_IF_NONE)
    champion_version: str | None = field(default=None, metadata=OMIT_IF_NONE)
    slices: dict[str, Any] | None = field(default=None, metadata=OMIT_IF_NONE)
    registry: str | None = field(default=None, metadata=OMIT_IF_NONE)
    model_name: str | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass(frozen=True)
class Judging:
    thresholds: Mapping[str, Threshold]
    confidence: float
    resamples: int
    seed: int
    max_churn: float | None
    min_slice_size: int


@dataclass(frozen=True)
class LabelsOrigin:
    """Where the labels were read: a `.npy` file (`field` None) or an array of the eval file."""

    source: Path
    field: str | None

    def describe(self) -> str:
        return str(self.source) if self.field is None else f"the `{self.field}` array of {self.source.name}"


def compare(*, candidate: str | Path, champion: Champion | None, eval_data: str | Path, labels: str | Path | None,
            task: TaskChoice, output: str | None, slice_key: str, max_slices: int, judging: Judging,
            labels_key: str = "labels", registry: str | None = None, model_name: str | None = None) -> Verdict:
    """Judge `candidate` against `champion` (downloaded) on `eval_data` (labels from `labels`, or its
    `labels_key` array); `registry` and `model_name`: where the champion (or its absence) was looked up."""
    champion_file = None if champion is None else onnx_file(champion)  # before any work: it may not match
    candidate, eval_data = Path(candidate), Path(eval_data)
    arrays = load_npz(eval_data)
    targets, labels_sha, origin = _labels(arrays, eval_data, labels, labels_key)
    ours = _predict(candidate, eval_data, output, len(targets), origin)
    slices = _slices(arrays, eval_data, slice_key, len(targets), max_slices)
    kind = _task(task, ours, targets, origin)
    data = {"eval": sha256_file(eval_data), **({"labels": labels_sha} if labels_sha else {})}
    subject = Subject(artifact=str(candidate), sha256=sha256_file(candidate), data=data)
    theirs = None
    if champion is None or champion_file is None:
        checks = [Check("champion", passed=True, detail="no model version carries the alias: first promotion, "
                                                        "nothing to compare against")]
    else:
        theirs = _predict(champion_file, eval_data, output, len(targets), origin)
        if theirs.shape != ours.shape:
            raise InputError(champion.label, field="output", expected=f"the candidate's output shape {ours.shape}",
                             found=f"shape {theirs.shape}: the champion answers a different question")
        checks = [Check("champion", passed=True, detail=f"{champion.label}, sha256 {champion.sha256} matches its "
                                                        "registry evidence")]
        data["champion"] = champion.sha256
        subject = dataclasses.replace(subject, data=data)
    checks.append(_finite(ours))
    # an embedding's neighbours over the whole set (n² similarities) are found once, for its metrics and its churn
    found = None if kind != "embedding" else \
        (retrieval_neighbours(ours), None if theirs is None else retrieval_neighbours(theirs))
    rows = _judge("", ours, theirs, targets, kind, judging, neighbours=found)
    if theirs is not None and kind != "regression":
        checks.append(_churn(kind, ours, theirs, judging.max_churn, neighbours=found))
    slice_summary = None if slices is None else _slice_rows(slices, ours, theirs, targets, kind, judging, rows)
    checks += [row.pop("check") for row in rows if "check" in row]
    if slice_summary is not None:
        slice_summary["slices"] = [_json_safe(row) for row in slice_summary["slices"]]
    details = CompareDetails(
        task=kind, samples=len(targets), metrics=list(METRICS[kind]), confidence=judging.confidence,
        resamples=judging.resamples, table=[_json_safe(row) for row in rows],
        champion=None if champion is None else ChampionRecord(label=champion.label, sha256=champion.sha256),
        champion_version=None if champion is None else champion.version, slices=slice_summary, registry=registry,
        model_name=model_name)
    verdict = Verdict.from_checks(STEP, checks, subject=subject, details=details)
    worst = None if slice_summary is None else slice_summary["worst"]
    if worst is not None:
        verdict = dataclasses.replace(verdict, message=f"{verdict.message}; worst slice {worst['slice']!r} "
                                                       f"({worst['metric']} {worst['candidate']:.4g})")
    return verdict


def onnx_file(champion: Champion) -> Path:
    """The champion's ONNX file among its downloaded files: the one whose SHA-256 is its evidence digest
    (`champion.sha256`); an `InputError` naming the version when none is."""
    path, _ = conv.find_by_digest(champion.files(), champion.tags, champion.uri)
    return path


def _json_safe(row: dict[str, Any]) -> dict[str, Any]:
    # a candidate with NaN outputs has NaN metrics: JSON has no NaN, and its own check says why
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in row.items()}


def _labels(arrays: Mapping[str, np.ndarray], eval_data: Path, labels: str | Path | None, key: str
            ) -> tuple[np.ndarray, str | None, LabelsOrigin]:
    if labels is None:
        if key not in arrays:
            raise InputError(eval_data, field=key, expected=f"a `{key}` array of labels (name another with "
                             "--labels-key, or pass a labels .npy with --labels)", found=f"arrays {sorted(arrays)}")
        return arrays[key], None, LabelsOrigin(eval_data, key)
    path = Path(labels)
    values = load_labels(path)
    return values, sha256_file(path), LabelsOrigin(path, None)


def _slices(arrays: Mapping[str, np.ndarray], eval_data: Path, key: str, n: int, limit: int) -> np.ndarray | None:
    if key not in arrays:
        return None
    values = arrays[key]
    if values.shape != (n,):
        raise InputError(eval_data, field=key, expected=f"one slice value per sample, shape ({n},)",
                         found=f"shape {values.shape}")
    if len(np.unique(values)) > limit:
        raise InputError(eval_data, field=key, expected=f"at most {limit} distinct slices",
                         found=f"{len(np.unique(values))}")
    return values


def _predict(model_path: Path, eval_data: Path, output: str | None, n: int, labels: LabelsOrigin) -> np.ndarray:
    model = load_onnx(model_path)
    specs = onnx_input_specs(model)
    arrays = load_npz(eval_data, expected=specs)
    names = [o.name for o in model.graph.output]
    name = output or names[0]
    if name not in names:
        raise InputError(model_path, field="output", expected=f"one of the outputs {names}", found=repr(name))
    for spec in specs:
        if len(arrays[spec.name]) != n:  # the labels are what is short (or long): the inputs are what is judged
            raise InputError(labels.source, field=labels.field,
                             expected=f"one label per sample: {len(arrays[spec.name])} labels, as many as the "
                                      f"samples of input `{spec.name}` in {eval_data.name}",
                             found=f"{n} labels in {labels.describe()}")
    runner = session(model)
    parts = [run_by_name(runner, {s.name: arrays[s.name][start:start + BATCH] for s in specs})[name]
             for start in range(0, n, BATCH)]
    return np.concatenate(parts)


# what each task reads, as an error states it
_SHAPES = {"classification": "integer labels (n,) and an (n, classes) output",
           "segmentation": "integer labels (n, …) and an (n, classes, …) output: one label per pixel",
           "embedding": "integer labels (n,) (the class of each sample) and an (n, dim) output, at least 2 samples",
           "regression": "float targets, one per output value"}


def _task(choice: TaskChoice, outputs: np.ndarray, targets: np.ndarray, labels: LabelsOrigin) -> Task:
    """Which task the labels and the output's shape fit; `auto` takes the one they fit (an (n, dim) output whose
    rows have unit L2 norm is an embedding, else a classifier's scores) and says which to declare when none."""
    n = len(targets)
    integer, rows = targets.dtype.kind in "iu", outputs.ndim == 2 and outputs.shape[1] > 1
    fits: dict[Task, bool] = {
        "classification": integer and targets.shape == (n,) and rows,
        "segmentation": integer and outputs.ndim >= 3 and outputs.shape[1] > 1
                        and targets.shape == outputs.shape[:1] + outputs.shape[2:],
        "embedding": integer and targets.shape == (n,) and rows and n >= 2,
        "regression": targets.dtype.kind == "f" and targets.size == outputs.size,
    }
    found = f"labels {targets.dtype}{list(targets.shape)}, output {outputs.dtype}{list(outputs.shape)}"
    kind: Task
    if choice == "auto":
        if fits["classification"]:
            kind = "embedding" if unit_rows(outputs) and fits["embedding"] else "classification"
        elif fits["segmentation"] or fits["regression"]:
            kind = "segmentation" if fits["segmentation"] else "regression"
        else:
            raise InputError(labels.source, field=labels.field, expected="; or ".join(_SHAPES.values()) +
                             " (else declare --task)", found=found)
    else:
        kind = choice
        if not fits[kind]:
            raise InputError(labels.source, field=labels.field, expected=f"for {kind}, {_SHAPES[kind]}", found=found)
    if kind in ("classification", "segmentation") and (targets.min() < 0 or targets.max() >= outputs.shape[1]):
        raise InputError(labels.source, field=labels.field, expected=f"class indices in [0, {outputs.shape[1]})",
                         found=f"values in [{targets.min()}, {targets.max()}]")
    return kind


Neighbours = tuple[np.ndarray, np.ndarray | None]  # an embedding's retrieval neighbours: candidate's, champion's


def _scorer(kind: Task, outputs: np.ndarray, targets: np.ndarray, neighbours: np.ndarray | None = None) -> Scorer:
    if kind == "classification":
        return classification_scorer(outputs, targets, outputs.shape[1])
    if kind == "segmentation":
        return segmentation_scorer(outputs, targets, outputs.shape[1])
    if kind == "embedding":
        return embedding_scorer(outputs, targets, neighbours=neighbours)
    return regression_scorer(outputs, targets.astype(np.float64))


def _judge(prefix: str, ours: np.ndarray, theirs: np.ndarray | None, targets: np.ndarray, kind: Task,
           judging: Judging, *, neighbours: Neighbours | None = None) -> list[dict[str, Any]]:
    """One table row per metric, each carrying the checks it produced (floor, vs_champion) under `check`;
    `neighbours`: an embedding's, already found on these samples."""
    n = len(targets)
    mine, champions = (None, None) if neighbours is None else neighbours
    scorer = _scorer(kind, ours, targets, mine)
    values = point(scorer, n)
    intervals: dict[str, tuple[float, float]] = {}
    champion_values: dict[str, float] = {}
    if theirs is not None:
        champion_scorer = _scorer(kind, theirs, targets, champions)
        champion_values = point(champion_scorer, n)
        intervals = paired_intervals(scorer, champion_scorer, n, resamples=judging.resamples, seed=judging.seed,
                                     confidence=judging.confidence)
    rows: list[dict[str, Any]] = []
    for metric in METRICS[kind]:
        threshold = judging.thresholds.get(metric, Threshold())
        row: dict[str, Any] = {"slice": prefix.removeprefix("slice.").rstrip(".") or "(all)", "metric": metric,
                               "samples": n, "candidate": values[metric], "champion": champion_values.get(metric)}
        checks = []
        if threshold.floor is not None:
            checks.append(_floor(prefix + metric, values[metric], threshold.floor))
        if metric in intervals:
            champion = champion_values[metric]
            allowed = threshold.allowed(champion)
            low, high = intervals[metric]
            row |= {"difference": values[metric] - champion, "ci_low": low, "ci_high": high, "allowed": allowed}
            checks.append(_versus(prefix + metric, values[metric], champion, (low, high), allowed,
                                  judging.confidence))
        for check in checks:
            rows.append({**row, "check": check, "passed": check.passed})
        if not checks:
            rows.append(row)
    return rows


def _floor(name: str, value: float, floor: float) -> Check:
    higher = HIGHER_IS_BETTER[name.rsplit(".", 1)[-1]]
    passed = value >= floor if higher else value <= floor
    word = "floor" if higher else "ceiling"
    return Check(f"{name}.floor", passed=bool(passed), value=value, limit=floor,
                 detail=f"candidate {value:.4g}, {word} {floor:.4g}")


def _versus(name: str, value: float, champion: float, interval: tuple[float, float], allowed: float,
            confidence: float) -> Check:
    """Fails only when the whole interval of the difference shows a regression larger than `allowed`. The check's
    value is what decides, on the limit's scale: the smallest regression the interval admits (negative: an
    improvement is possible), at most `allowed`; the difference itself is in the detail."""
    higher = HIGHER_IS_BETTER[name.rsplit(".", 1)[-1]]
    low, high = interval
    best_case = high if higher else -low  # the most favourable improvement the interval admits
    passed = not best_case < -allowed
    if passed:
        verdict = "no regression beyond the allowance" if best_case >= 0 or low <= 0 <= high else \
            "within the allowance"
    else:
        verdict = f"regression beyond the allowance of {allowed:.4g} at {confidence:.0%}"
    return Check(f"{name}.vs_champion", passed=passed, value=-best_case, limit=allowed,
                 detail=f"candidate {value:.4g} vs champion {champion:.4g}: difference {value - champion:+.4g}, "
                        f"{confidence:.0%} interval [{low:+.4g}, {high:+.4g}]; {verdict}")


def _finite(outputs: np.ndarray) -> Check:
    bad = int((~np.isfinite(outputs)).sum()) if outputs.dtype.kind in "fc" else 0
    return Check("candidate.outputs_finite", passed=bad == 0, value=bad, limit=0,
                 detail=f"{bad} NaN/Inf values in the candidate's outputs" if bad else "all outputs finite")


def _churn(kind: Task, ours: np.ndarray, theirs: np.ndarray, limit: float | None, *,
           neighbours: Neighbours | None) -> Check:
    """The share of answers that change between champion and candidate: a sample's top-1, a pixel's class, a
    sample's nearest neighbour in the eval set (`neighbours`: both models', found for the metrics)."""
    if kind == "embedding":
        assert neighbours is not None and neighbours[1] is not None
        what = "samples change their nearest neighbour"
        churn = float(np.mean(neighbours[0][:, 0] != neighbours[1][:, 0]))
    else:
        what = "pixels change their class" if kind == "segmentation" else "samples change their top-1"
        churn = float(np.mean(ours.argmax(axis=1) != theirs.argmax(axis=1)))
    if limit is None:
        return Check("churn", passed=True, value=churn, detail=f"{churn:.2%} of {what} (reported; not gated)")
    return Check("churn", passed=churn <= limit, value=churn, limit=limit,
                 detail=f"{churn:.2%} of {what} (at most {limit:.2%} allowed)")


def _slice_rows(slices: np.ndarray, ours: np.ndarray, theirs: np.ndarray | None, targets: np.ndarray,
                kind: Task, judging: Judging, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Append each slice's rows (with their checks) to `rows`; return the slice summary, worst slice first."""
    primary = METRICS[kind][0]
    higher = HIGHER_IS_BETTER[primary]
    summary: list[dict[str, Any]] = []
    for value in np.unique(slices):
        mask = slices == value
        label = str(value.item() if hasattr(value, "item") else value)
        size = int(mask.sum())
        if size < judging.min_slice_size:
            summary.append({"slice": label, "samples": size, "judged": False})
            continue
        found = _judge(f"slice.{label}.", ours[mask], None if theirs is None else theirs[mask], targets[mask], kind,
                       judging)
        rows += found
        first = next(r for r in found if r["metric"] == primary)
        summary.append({"slice": label, "samples": size, "judged": True, "metric": primary,
                        "candidate": first["candidate"], "champion": first["champion"],
                        "difference": first.get("difference")})
    judged = [s for s in summary if s["judged"]]

    def badness(entry: dict[str, Any]) -> float:
        # worst = largest drop against the champion; without one, the lowest score (highest error)
        key = entry["difference"] if entry["difference"] is not None else entry["candidate"]
        return -key if higher else key

    judged = [s for s in judged if np.isfinite(badness(s))]
    worst = max(judged, key=badness) if judged else None
    return {"count": len(summary), "min_size": judging.min_slice_size, "slices": summary, "worst": worst}
