"""What a model output means, and one judgement of how far a candidate (INT8, FP16) moved it from the reference.

Every task counts the *positions* a candidate harmed, so that one limit — the share left unharmed, `agreement` —
reads the same on every model, and `common/resolution.py` can say what a sample count resolves:

- classification: one position per sample (per token for N×T×V logits); harmed when the argmax over the class axis
  differs. Also reported: KL(p_ref ‖ p_cand), the softmax entropy shift, and confidence compression (how much the
  top-1/top-2 gap and the top-1 probability shrank: an INT8 logit scale that squeezes the margin flips argmax next).
- segmentation: one position per pixel (class axis 1 of N×C×H×W by default); harmed as above; also the mIoU of the
  candidate's label map against the reference's.
- embedding: one position per sample; harmed when the cosine similarity to the reference falls below
  `min_cosine`, or — where the reference's rows have unit norm — its norm is off 1 by more than 1 − `min_cosine`
  (cosine ignores scale; an unnormalised answer would agree); also the mean and worst cosine, the worst norm
  error and nearest-neighbour agreement at k (retrieval is what embeddings serve).
- regression: one position per sample; harmed when any of its values moves by more than `max_error` times that
  output column's spread (standard deviation over the reference); also the worst column's R² of the candidate
  against the reference.

`auto` decides from the output's shape and values (rank ≥ 4: segmentation over axis 1; rows of unit L2 norm: an
embedding; a last axis of one or rank 1: regression; else classification over the last axis), or from labels when
their shape is the output's less one axis. Declare the task where that guess is wrong: `--task`, `--class-axis`
for every output, `--output-task NAME=TASK[:AXIS]` for one output of several (a classifier's logits beside a box
regressor). Every output is judged, each as its own task: a candidate that harms any of them is caught.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from skewgate.common.errors import InputError

Task = Literal["auto", "classification", "segmentation", "embedding", "regression"]
TASKS: tuple[str, ...] = get_args(Task)
CLASS_TASKS = ("classification", "segmentation")
EPS = 1e-12
UNIT_NORM = 1e-3  # rows whose L2 norm is within this of 1 were normalised: an embedding
NEIGHBOURS = 10  # k of the nearest-neighbour agreement
NEIGHBOUR_SAMPLES = 2048  # samples the neighbour agreement looks at (an n² similarity matrix)


@dataclass(frozen=True)
class TaskSpec:
    """How one output is judged: its task (never `auto`), its class axis (class tasks only) and why."""

    task: str
    class_axis: int | None = None
    why: str = "declared"


@dataclass(frozen=True)
class Agreement:
    """The share of positions a candidate left unharmed, and the task's own figures beside it."""

    task: str
    agreement: float
    harmed: int
    positions: int
    harm: str  # what counts as harmed, for the verdict's detail
    figures: dict[str, float | None] = field(default_factory=dict)  # the agreement under its `check` name

    @property
    def check(self) -> str:
        return check_name(self.task)

    def meets(self, limit: float) -> bool:
        """The one decision calibrate, `parity --int8` and `parity --fp16` make with the agreement. No rounding
        allowance: kept / positions is one correctly rounded division, so 297 of 300 is exactly 0.99."""
        return self.agreement >= limit


def describe_agreement(spec: TaskSpec, judged: Agreement, limit: float) -> str:
    """What a check says of one output's agreement: its task and why, the positions kept and what harms one, and
    what the sample count resolves against the budget 1 − `limit` (`common/resolution.py`)."""
    from skewgate.common.resolution import describe

    return (f"{spec.task} ({spec.why}): {judged.positions - judged.harmed} of {judged.positions} positions kept "
            f"({judged.harm}: harmed); " + describe(judged.harmed, judged.positions, 1.0 - limit))


def check_name(task: str) -> str:
    """The name of a task's agreement check and figure (parity prefixes `int8.`)."""
    return {"embedding": "cosine_agreement", "regression": "error_agreement"}.get(task, "top1_agreement")


def resolve(output: np.ndarray, *, task: str = "auto", class_axis: int | None = None,
            labels: np.ndarray | None = None, name: str = "output") -> TaskSpec:
    """The task of `output` (batch first) as declared, or as `auto` reads its shape, values and `labels`."""
    if task not in TASKS:
        raise InputError("task", expected=f"one of {', '.join(TASKS)}", found=repr(task))
    rank = output.ndim
    if class_axis is not None:
        class_axis = _axis(output, class_axis, name)
    if task == "auto":
        if class_axis is not None:
            return TaskSpec("classification" if rank == 2 else "segmentation", class_axis, "class axis declared")
        from_labels = _axis_from_labels(output, labels)
        if from_labels is not None:
            return TaskSpec("classification" if rank == 2 else "segmentation", from_labels,
                            f"labels of shape {list(labels.shape)}")  # type: ignore[union-attr]
        if rank >= 4 and output.shape[1] > 1:
            return TaskSpec("segmentation", 1, f"rank {rank}: N×C×… with classes on axis 1")
        if rank >= 2 and output.shape[-1] > 1:
            if rank == 2 and len(output) and unit_rows(output):
                return TaskSpec("embedding", None, "every row has unit L2 norm")
            return TaskSpec("classification", rank - 1, "a class axis last")
        return TaskSpec("regression", None, f"shape {list(output.shape)}: one value per sample")
    if task in CLASS_TASKS:
        if class_axis is None:
            class_axis = _axis_from_labels(output, labels)
        if class_axis is None:
            class_axis = _axis(output, 1 if task == "segmentation" else -1, name)
        return TaskSpec(task, class_axis)
    if task == "embedding" and (rank < 2 or int(np.prod(output.shape[1:])) < 2):
        raise InputError(name, expected="an embedding: a vector per sample", found=f"shape {list(output.shape)}")
    return TaskSpec(task)


def parse_output_tasks(entries: Iterable[str], *, field_name: str = "--output-task") -> dict[str, str]:
    """`NAME=TASK[:AXIS]` entries (the CLI's repeated `--output-task`, a KFP parameter's comma-separated list) as
    output name → "TASK[:AXIS]", each checked; empty entries are skipped."""
    found: dict[str, str] = {}
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        if not sep or not name.strip():
            raise InputError(field_name, expected="NAME=TASK or NAME=TASK:AXIS (an output name, a task)",
                             found=repr(entry))
        if name.strip() in found:
            raise InputError(field_name, expected="each output named once", found=f"{name.strip()!r} twice")
        _split_task(value.strip(), field_name)
        found[name.strip()] = value.strip()
    return found


def _split_task(value: str, field_name: str) -> tuple[str, int | None]:
    task, _, axis = value.partition(":")
    if task not in TASKS:
        raise InputError(field_name, expected=f"a task, one of {', '.join(TASKS)}", found=repr(value))
    if not axis:
        return task, None
    try:
        return task, int(axis)
    except ValueError as err:
        raise InputError(field_name, expected="TASK:AXIS with an integer class axis", found=repr(value)) from err


def check_task_options(*, task: str, class_axis: int | None, output_tasks: Mapping[str, str]) -> None:
    """A step's task settings, checked before anything is judged: a mistyped task is an error even where no
    output would have read it."""
    if task not in TASKS:
        raise InputError("task", expected=f"one of {', '.join(TASKS)}", found=repr(task))
    if class_axis is not None and not isinstance(class_axis, int):
        raise InputError("class_axis", expected="an integer axis, or none (inferred)", found=repr(class_axis))
    for value in output_tasks.values():
        _split_task(value, "output_tasks")


def resolve_outputs(outputs: Mapping[str, np.ndarray], *, task: str = "auto", class_axis: int | None = None,
                    output_tasks: Mapping[str, str] | None = None,
                    labels: np.ndarray | None = None) -> dict[str, TaskSpec]:
    """Every output's task: as `output_tasks` declares it for that output (`TASK[:AXIS]`), else as `task` and
    `class_axis` say for all. A name in `output_tasks` that is not an output is an error: a declaration that
    judges nothing must not pass unnoticed."""
    declared = dict(output_tasks or {})
    unknown = sorted(set(declared) - set(outputs))
    if unknown:
        raise InputError("output_tasks", expected=f"outputs of the model ({', '.join(outputs)})",
                         found=", ".join(map(repr, unknown)))
    specs = {}
    for name, output in outputs.items():
        if name in declared:
            own, axis = _split_task(declared[name], "output_tasks")
            spec = resolve(output, task=own, class_axis=axis, labels=labels, name=name)
            specs[name] = TaskSpec(spec.task, spec.class_axis, f"declared for {name}" if own != "auto" else spec.why)
        else:
            specs[name] = resolve(output, task=task, class_axis=class_axis, labels=labels, name=name)
    return specs


def agreements(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
               specs: Mapping[str, TaskSpec], *, probabilities: Iterable[str] = (), min_cosine: float = 0.99,
               max_error: float = 0.05) -> dict[str, Agreement]:
    """Every output in `specs` judged as its task says (`probabilities`: the outputs that are a Softmax's)."""
    soft = set(probabilities)
    return {name: agreement(reference[name], candidate[name], spec, probabilities=name in soft,
                            min_cosine=min_cosine, max_error=max_error, name=name)
            for name, spec in specs.items()}


def worst(judged: Mapping[str, Agreement]) -> tuple[str, Agreement]:
    """The output whose agreement is lowest (the first such, in the model's order)."""
    if not judged:
        raise InputError("outputs", expected="at least one output to judge", found="none")
    name = min(judged, key=lambda n: judged[n].agreement)
    return name, judged[name]


def parse_class_axis(text: str) -> int | None:
    """A KFP parameter's class axis: empty is "inferred"."""
    try:
        return int(text) if text.strip() else None
    except ValueError as err:
        raise InputError("class_axis", expected="an integer axis, or empty (inferred)", found=repr(text)) from err


def agreement(reference: np.ndarray, candidate: np.ndarray, spec: TaskSpec, *, probabilities: bool = False,
              min_cosine: float = 0.99, max_error: float = 0.05, name: str = "output") -> Agreement:
    """Judge `candidate` against `reference` (same shape) as `spec` says. `probabilities`: the output is a
    softmax already (a second softmax would flatten it and hide the damage). Another shape, or no sample at all,
    is an error naming the output (`name`): there is nothing to judge, and nothing may pass for it."""
    if candidate.shape != reference.shape:
        raise InputError(name, field="shape", expected=f"the reference's shape {list(reference.shape)}",
                         found=f"{list(candidate.shape)} from the candidate")
    if reference.size == 0:
        raise InputError(name, expected="at least one sample to judge", found=f"shape {list(reference.shape)}")
    if spec.task in CLASS_TASKS:
        return _classes(reference, candidate, spec, probabilities=probabilities)
    ref = reference.reshape(len(reference), -1).astype(np.float64)
    cand = candidate.reshape(len(candidate), -1).astype(np.float64)
    if spec.task == "embedding":
        return _embedding(ref, cand, min_cosine)
    return _regression(ref, cand, max_error)


def _axis(output: np.ndarray, axis: int, name: str) -> int:
    rank = output.ndim
    if not -rank <= axis < rank or rank < 2 or axis % rank == 0:
        raise InputError(name, field="class_axis", expected=f"an axis 1..{rank - 1} (or negative) of a batch-first "
                         "output", found=f"{axis} on shape {list(output.shape)}")
    axis %= rank
    if output.shape[axis] < 2:
        raise InputError(name, field="class_axis", expected="an axis of at least 2 classes",
                         found=f"axis {axis} of size {output.shape[axis]} in shape {list(output.shape)}")
    return axis


def _axis_from_labels(output: np.ndarray, labels: np.ndarray | None) -> int | None:
    """The axis whose removal leaves the labels' shape (axis 1 first, then the last, then the others)."""
    if labels is None or labels.ndim != output.ndim - 1 or output.ndim < 2:
        return None
    order = [1, output.ndim - 1, *range(2, output.ndim - 1)]
    return next((a for a in order if output.shape[a] > 1
                 and output.shape[:a] + output.shape[a + 1:] == labels.shape), None)


def unit_rows(output: np.ndarray) -> bool:
    """Whether every row (last axis) has unit L2 norm, within `UNIT_NORM`: the output was normalised."""
    norms = np.linalg.norm(output.astype(np.float64), axis=-1)
    return bool(np.all(np.abs(norms - 1.0) <= UNIT_NORM))


def _distribution(x: np.ndarray, probabilities: bool) -> np.ndarray:
    if probabilities:
        p = np.clip(x, 0.0, None)
        return p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _classes(reference: np.ndarray, candidate: np.ndarray, spec: TaskSpec, *, probabilities: bool) -> Agreement:
    axis = spec.class_axis if spec.class_axis is not None else reference.ndim - 1
    classes = reference.shape[axis]
    ref = np.moveaxis(reference, axis, -1).reshape(-1, classes).astype(np.float64)
    cand = np.moveaxis(candidate, axis, -1).reshape(-1, classes).astype(np.float64)
    broken = np.asarray(~np.isfinite(cand).all(axis=-1))  # a NaN or inf row decides nothing: harmed
    cand = np.where(broken[:, None], 0.0, cand)
    top_ref, top_cand = ref.argmax(-1), cand.argmax(-1)
    same = (top_ref == top_cand) & ~broken
    share = float(same.mean())
    p, q = _distribution(ref, probabilities), _distribution(cand, probabilities)
    log_p, log_q = np.log(p + EPS), np.log(q + EPS)
    sorted_p, sorted_q = np.sort(p, axis=-1)[:, -2:], np.sort(q, axis=-1)[:, -2:]
    figures: dict[str, float | None] = {
        "top1_agreement": share,
        "kl_divergence": float(np.mean(np.sum(p * (log_p - log_q), axis=-1))),
        "entropy_shift": float(np.mean(np.sum(p * log_p, -1) - np.sum(q * log_q, -1))),
        # confidence compression: positive when the candidate is less sure than the reference
        "gap_shrinkage": float(np.mean((sorted_p[:, 1] - sorted_p[:, 0]) - (sorted_q[:, 1] - sorted_q[:, 0]))),
        "confidence_drop": float(np.mean(sorted_p[:, 1] - sorted_q[:, 1])),
    }
    harm = "argmax differs"
    if spec.task == "segmentation":
        figures["miou"] = _miou(top_ref, np.where(broken, -1, top_cand), classes)
        harm = f"a pixel's argmax over axis {axis} differs"
    harmed = int(np.count_nonzero(~same))
    return Agreement(spec.task, share, harmed, len(same), harm, figures)


def _miou(reference: np.ndarray, candidate: np.ndarray, classes: int) -> float:
    """Mean IoU of the candidate's label map against the reference's, over the classes either holds."""
    both = np.bincount(reference[np.equal(reference, candidate)], minlength=classes)
    ref_count = np.bincount(reference, minlength=classes)
    cand_count = np.bincount(candidate[candidate >= 0], minlength=classes)
    union = ref_count + cand_count - both
    present = union > 0
    return float(np.mean(both[present] / union[present])) if present.any() else 1.0


def _embedding(ref: np.ndarray, cand: np.ndarray, min_cosine: float) -> Agreement:
    """Harmed: a cosine below `min_cosine` — and, where the reference's rows have unit norm (the model
    normalised them, and retrieval compares them by dot product), a candidate row whose norm is off 1 by more than
    1 − `min_cosine`: cosine ignores scale, so an unnormalised answer would otherwise agree at 1.0."""
    ref_norm, cand_norm = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = np.sum(ref * cand, axis=1) / (ref_norm * cand_norm)
    kept = cosine >= min_cosine  # NaN (a zero or broken vector) is harmed
    harm = f"cosine similarity below {min_cosine}"
    normalised = len(ref) > 0 and unit_rows(ref)
    if normalised:
        kept &= np.abs(cand_norm - 1.0) <= 1.0 - min_cosine  # NaN is harmed here too
        harm += f", or a norm off 1 by more than {1.0 - min_cosine:.3g} (the reference's rows have unit norm)"
    share = float(kept.mean()) if len(kept) else 0.0
    figures: dict[str, float | None] = {
               "cosine_agreement": share,
               "cosine_mean": float(np.nanmean(cosine)) if np.isfinite(cosine).any() else 0.0,
               "cosine_min": float(np.nan_to_num(cosine, nan=-1.0).min()) if len(cosine) else 0.0}
    if normalised:
        figures["norm_error_max"] = float(np.nan_to_num(np.abs(cand_norm - 1.0), nan=np.inf).max())
    if len(ref) > 2 and np.isfinite(cand).all():
        figures["neighbour_agreement"] = _neighbour_agreement(ref, cand)
    return Agreement("embedding", share, int(np.count_nonzero(~kept)), len(kept), harm, figures)


def _neighbour_agreement(ref: np.ndarray, cand: np.ndarray) -> float:
    """The share of each sample's k nearest neighbours (by cosine, among the judged samples) that the candidate's
    embeddings keep."""
    ref, cand = ref[:NEIGHBOUR_SAMPLES], cand[:NEIGHBOUR_SAMPLES]
    k = min(NEIGHBOURS, len(ref) - 1)

    def nearest(x: np.ndarray) -> np.ndarray:
        unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
        similarity = unit @ unit.T
        np.fill_diagonal(similarity, -np.inf)
        return np.argpartition(-similarity, k - 1, axis=1)[:, :k]

    a, b = nearest(ref), nearest(cand)
    return float(np.mean([len(np.intersect1d(x, y)) / k for x, y in zip(a, b, strict=True)]))


def _regression(ref: np.ndarray, cand: np.ndarray, max_error: float) -> Agreement:
    spread = ref.std(axis=0)
    # a constant column has no spread: its own magnitude (or 1) sets the scale
    scale = np.where(spread > 0, spread, np.maximum(np.abs(ref).max(axis=0, initial=0.0), 1.0))
    with np.errstate(invalid="ignore"):
        error = np.abs(cand - ref) / scale
    kept = np.all(error <= max_error, axis=1)  # NaN is harmed
    share = float(kept.mean()) if len(kept) else 0.0
    finite = bool(np.isfinite(cand).all())  # else R² and the worst error are None (strict JSON has no inf)
    residual = np.sum((cand - ref) ** 2, axis=0)
    total = np.sum((ref - ref.mean(axis=0)) ** 2, axis=0)
    # per column, the worst: a pooled R² would be the largest-valued column's alone
    r2 = np.where(total > 0, 1.0 - residual / np.where(total > 0, total, 1.0), (residual == 0).astype(float))
    figures: dict[str, float | None] = {
        "error_agreement": share,
        "r2": float(r2.min(initial=1.0)) if finite else None,
        "max_relative_error": float(error.max(initial=0.0)) if finite else None}
    return Agreement("regression", share, int(np.count_nonzero(~kept)), len(kept),
                     f"a value moved by more than {max_error} of its column's spread", figures)
