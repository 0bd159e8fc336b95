"""One judgement of a candidate's outputs per task: which task `auto` reads, and each task's harm at its limit."""

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.common.output_tasks import Agreement, TaskSpec, agreement, resolve

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(64, 10)).astype(np.float32)
EMBEDDINGS = RNG.normal(size=(64, 32))
EMBEDDINGS /= np.linalg.norm(EMBEDDINGS, axis=1, keepdims=True)


@pytest.mark.parametrize("output, labels, task, axis", [
    pytest.param(LOGITS, None, "classification", 1, id="logits-N×C"),
    pytest.param(np.zeros((4, 7, 50)), None, "classification", 2, id="token-logits-N×T×V"),
    pytest.param(np.zeros((2, 5, 8, 8)), None, "segmentation", 1, id="N×C×H×W"),
    pytest.param(np.zeros((2, 8, 8, 5)), np.zeros((2, 8, 8), int), "segmentation", 3, id="NHWC-read-from-labels"),
    pytest.param(EMBEDDINGS, None, "embedding", None, id="unit-norm-rows"),
    pytest.param(EMBEDDINGS * 1.01, None, "classification", 1, id="rows-1%-off-unit-norm"),
    pytest.param(np.zeros((4, 1)), None, "regression", None, id="one-value-per-sample"),
    pytest.param(np.zeros(4), None, "regression", None, id="rank-1"),
])
def test_auto_reads_the_task_from_shape_values_and_labels(output, labels, task, axis):
    spec = resolve(output, labels=labels)
    assert (spec.task, spec.class_axis) == (task, axis), spec.why


def test_a_declared_task_and_axis_win_over_the_guess():
    assert resolve(EMBEDDINGS, task="classification") == TaskSpec("classification", 1)
    assert resolve(np.zeros((2, 8, 8, 5)), task="segmentation", class_axis=-1) == TaskSpec("segmentation", 3)
    assert resolve(LOGITS, task="embedding").task == "embedding"


@pytest.mark.parametrize("kwargs, message", [
    pytest.param({"task": "detection"}, r"task: expected one of auto, classification, .* found 'detection'",
                 id="unknown-task"),
    pytest.param({"class_axis": 0}, r"logits: class_axis: expected an axis 1..1 .* found 0 on shape \[64, 10\]",
                 id="the-batch-axis"),
    pytest.param({"class_axis": 5}, r"class_axis: expected an axis", id="beyond-the-rank"),
])
def test_a_wrong_declaration_names_the_field(kwargs, message):
    with pytest.raises(InputError, match=message):
        resolve(LOGITS, name="logits", **kwargs)


def test_an_axis_of_one_class_is_refused():
    with pytest.raises(InputError, match=r"class_axis: expected an axis of at least 2 classes, found axis 1 of size 1"):
        resolve(np.zeros((4, 1)), task="classification")


def flip(logits, rows):
    """Swap the top two classes of `rows`: their argmax moves, every other row is untouched."""
    out = logits.copy()
    for r in rows:
        top = np.argsort(out[r])[-2:]
        out[r, top] = out[r, top[::-1]]
    return out


@pytest.mark.parametrize("flipped, share", [
    pytest.param(0, 1.0, id="identical"),
    pytest.param(1, 63 / 64, id="one-of-64"),
    pytest.param(64, 0.0, id="all"),
])
def test_classification_counts_samples_whose_argmax_moved(flipped, share):
    judged = agreement(LOGITS, flip(LOGITS, range(flipped)), resolve(LOGITS))
    assert (judged.agreement, judged.harmed, judged.positions) == (share, flipped, 64)
    assert judged.figures["top1_agreement"] == share and judged.check == "top1_agreement"


def test_confidence_compression_is_measured():
    squashed = agreement(LOGITS, LOGITS * 0.5, resolve(LOGITS))
    assert squashed.agreement == 1.0  # the argmax holds…
    assert squashed.figures["gap_shrinkage"] > 0.05 and squashed.figures["confidence_drop"] > 0.05  # …the margin not
    assert agreement(LOGITS, LOGITS, resolve(LOGITS)).figures["gap_shrinkage"] == 0.0


def test_probabilities_are_compared_as_they_are():
    p = np.array([[0.98, 0.01, 0.01], [0.2, 0.7, 0.1]])
    q = np.array([[0.90, 0.05, 0.05], [0.2, 0.7, 0.1]])
    spec = resolve(p)
    as_probabilities = agreement(p, q, spec, probabilities=True)
    expected = np.mean([np.sum(p[0] * np.log(p[0] / q[0])), 0.0])
    assert as_probabilities.figures["kl_divergence"] == pytest.approx(expected, rel=1e-6)
    # a second softmax over probabilities flattens them and understates the damage
    assert agreement(p, q, spec).figures["kl_divergence"] < as_probabilities.figures["kl_divergence"] / 10


def test_a_non_finite_candidate_is_harmed_not_skipped():
    broken = LOGITS.copy()
    broken[3, 0] = np.nan
    judged = agreement(LOGITS, broken, resolve(LOGITS))
    assert judged.harmed == 1 and np.isfinite(judged.figures["kl_divergence"])


def test_segmentation_is_judged_per_pixel_over_the_class_axis_with_miou():
    logits = RNG.normal(size=(2, 5, 4, 6))
    changed = logits.copy()
    changed[0, :, 0, :3] = -changed[0, :, 0, :3]  # three pixels' classes reversed
    judged = agreement(logits, changed, resolve(logits))
    assert (judged.positions, judged.harmed) == (48, 3)
    assert judged.figures["miou"] < 1.0 and agreement(logits, logits, resolve(logits)).figures["miou"] == 1.0
    # the old reading, the last axis (width) as classes, counts other things: 8 rows of 6, not 48 pixels
    assert agreement(logits, changed, TaskSpec("classification", 3)).positions == 40


def rotate(x, radians):
    """Each row turned by `radians` in its first two coordinates' plane (cosine to the original: cos(radians)
    times the share of the row's energy in that plane, plus the rest)."""
    out = x.copy()
    c, s = np.cos(radians), np.sin(radians)
    out[:, 0], out[:, 1] = c * x[:, 0] - s * x[:, 1], s * x[:, 0] + c * x[:, 1]
    return out


@pytest.mark.parametrize("cosine, harmed", [
    pytest.param(0.9901, 0, id="just-above-0.99"),
    pytest.param(0.9899, 64, id="just-below-0.99"),
])
def test_an_embedding_sample_is_harmed_below_the_cosine_limit(cosine, harmed):
    plane = np.zeros((64, 32))
    plane[:, 0] = 1.0  # unit rows in the rotated plane: the cosine is exactly cos(radians)
    judged = agreement(plane, rotate(plane, np.arccos(cosine)), TaskSpec("embedding"), min_cosine=0.99)
    assert judged.harmed == harmed and judged.check == "cosine_agreement"
    assert judged.figures["cosine_min"] == pytest.approx(cosine)


def test_embedding_reports_nearest_neighbour_agreement():
    raw = EMBEDDINGS * np.linspace(0.5, 3, len(EMBEDDINGS))[:, None]  # a reference the model did not normalise
    same = agreement(raw, raw * 2, TaskSpec("embedding"))  # scale does not move a cosine
    assert same.agreement == 1.0 and same.figures["neighbour_agreement"] == 1.0 and "norm_error_max" not in \
        same.figures
    shuffled = agreement(EMBEDDINGS, EMBEDDINGS[::-1].copy(), TaskSpec("embedding"))
    assert shuffled.figures["neighbour_agreement"] < 0.5 and shuffled.agreement < 0.1


@pytest.mark.parametrize(("scale", "harmed"), [
    pytest.param(1.0099, 0, id="norm-just-within-0.01"),
    pytest.param(0.9901, 0, id="norm-just-within-0.01-below"),
    pytest.param(1.0101, 64, id="norm-just-beyond-0.01"),
    pytest.param(2.0, 64, id="unnormalised-twice"),
])
def test_a_normalised_embedding_served_at_another_norm_is_harmed(scale, harmed):
    """Cosine ignores scale: where the model normalised its rows (the reference's are unit), a candidate row off
    norm 1 by more than 1 − min_cosine is harmed, as retrieval by dot product would rank it otherwise."""
    judged = agreement(EMBEDDINGS, EMBEDDINGS * scale, TaskSpec("embedding"), min_cosine=0.99)
    assert judged.harmed == harmed and judged.figures["cosine_min"] == pytest.approx(1.0)
    assert judged.figures["norm_error_max"] == pytest.approx(abs(scale - 1.0))
    assert "a norm off 1 by more than 0.01" in judged.harm


@pytest.mark.parametrize("shift, harmed", [
    pytest.param(0.049, 0, id="just-within-5%-of-the-spread"),
    pytest.param(0.051, 64, id="just-beyond"),
])
def test_a_regression_sample_is_harmed_beyond_its_share_of_the_spread(shift, harmed):
    values = RNG.normal(size=(64, 3)) * [1.0, 10.0, 100.0]  # each column against its own spread
    moved = values + shift * values.std(axis=0) * np.array([0.0, 0.0, 1.0])
    judged = agreement(values, moved, TaskSpec("regression"), max_error=0.05)
    assert judged.harmed == harmed and judged.check == "error_agreement"
    assert judged.figures["max_relative_error"] == pytest.approx(shift)
    assert judged.figures["r2"] == pytest.approx(1 - shift**2, rel=1e-9)  # the moved column's, not a pooled one


def test_a_non_finite_regression_has_no_r2_to_report():
    values = np.arange(8.0).reshape(8, 1)
    moved = values.copy()
    moved[0] = np.inf
    judged = agreement(values, moved, TaskSpec("regression"))
    assert judged.harmed == 1 and judged.figures["r2"] is None and judged.figures["max_relative_error"] is None


def test_each_task_names_its_check():
    assert [Agreement(t, 1.0, 0, 1, "").check for t in ("classification", "segmentation", "embedding", "regression")
            ] == ["top1_agreement", "top1_agreement", "cosine_agreement", "error_agreement"]


@pytest.mark.parametrize("kept, meets", [
    pytest.param(297, True, id="297-of-300-is-0.99"),
    pytest.param(296, False, id="296-of-300-is-below"),
])
def test_the_agreement_meets_its_limit_at_the_line(kept, meets):
    judged = Agreement("classification", kept / 300, 300 - kept, 300, "argmax differs")
    assert judged.meets(0.99) is meets


def test_output_tasks_parse_name_task_and_axis_and_refuse_what_is_off():
    from skewgate.common.output_tasks import parse_output_tasks

    assert parse_output_tasks(["boxes=regression", " ", "seg=segmentation:1"]) == {
        "boxes": "regression", "seg": "segmentation:1"}
    for entry, message in [("boxes", "NAME=TASK"), ("boxes=regresion", "a task"), ("seg=segmentation:x", "integer")]:
        with pytest.raises(InputError, match=message):
            parse_output_tasks([entry])
    with pytest.raises(InputError, match="twice"):
        parse_output_tasks(["a=regression", "a=embedding"])


def test_each_output_takes_its_declared_task_and_the_rest_the_common_one():
    from skewgate.common.output_tasks import resolve_outputs

    specs = resolve_outputs({"logits": LOGITS, "boxes": np.zeros((64, 4))}, output_tasks={"boxes": "regression"})
    assert (specs["logits"].task, specs["boxes"].task) == ("classification", "regression")


@pytest.mark.parametrize("candidate, message", [pytest.param(LOGITS[:, :5], r"shape: expected the reference's shape",
                                                             id="another-shape"),
                                                pytest.param(None, "at least one sample", id="no-sample")])
def test_nothing_to_judge_is_an_error_naming_the_output(candidate, message):
    reference = LOGITS if candidate is not None else LOGITS[:0]
    with pytest.raises(InputError, match=message):
        agreement(reference, reference[:0] if candidate is None else candidate, TaskSpec("classification", 1),
                  name="logits")
