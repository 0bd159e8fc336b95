"""Tolerances grounded in the model's own float32 rounding: measured against a float64 run, never tighter than
the floor, and a documented size-aware fallback where the float64 run cannot stand in for the exact result."""

import math

import numpy as np
import pytest

from skewgate.common.compare import Tolerance
from skewgate.common.rounding import FACTOR, MAX_GROUNDED, Rounding, beside, first_samples, measure

FLOOR = Tolerance(rtol=1.3e-6, atol=1e-5)


def _values(noise: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    exact = np.random.default_rng(0).normal(size=(4, 10)) * 30.0
    narrow = (exact + noise * np.sign(exact)).astype(np.float32)
    return {"logits": narrow, "ids": np.arange(4)}, {"logits": exact, "ids": np.arange(4)}


def test_the_tolerance_is_the_rounding_pytorch_itself_has_times_the_documented_factor():
    narrow, wide = _values(3e-4)
    rounding = measure(narrow, lambda: wide, samples=range(4), ops=50)
    error = rounding.error["logits"]
    assert 3e-4 <= error < 3.1e-4
    assert "ids" not in rounding.error  # integers are exact: nothing to ground
    tolerance = rounding.tolerance("logits", FLOOR)
    assert tolerance == Tolerance(rtol=FLOOR.rtol, atol=(FACTOR + 1) * error)
    assert rounding.summary()["method"] == "float64 reference"


def test_grounding_never_tightens_below_the_floor():
    narrow, wide = _values(0.0)
    rounding = measure(narrow, lambda: wide, samples=range(4), ops=50)
    assert rounding.tolerance("logits", FLOOR) == FLOOR


@pytest.mark.parametrize(
    ("float64", "why"),
    [
        pytest.param(lambda: (_ for _ in ()).throw(NotImplementedError("no float64 kernel")), "does not run in float64",
                     id="no-float64-kernel"),
        pytest.param(lambda: _values(0.0)[1] | {"logits": _values(0.0)[1]["logits"] + 1.0}, "more than rounding",
                     id="differs-by-more-than-rounding"),
    ],
)
def test_without_a_usable_float64_run_the_size_aware_tolerance_is_used_and_said(float64, why):
    narrow, _ = _values(0.0)
    rounding = measure(narrow, float64, samples=range(4), ops=100)
    assert why in rounding.fallback
    assert rounding.summary()["method"] == "size-aware"
    assert rounding.tolerance("logits", FLOOR) == Tolerance(rtol=FLOOR.rtol * 10, atol=FLOOR.atol * 10)
    assert math.isclose(rounding.summary()["scale"], 10.0)


def test_a_runtime_may_vary_with_the_batch_as_much_as_the_reference_does():
    assert beside(FLOOR, 1e-4) == Tolerance(rtol=FLOOR.rtol, atol=FACTOR * 1e-4)
    assert beside(FLOOR, 0.0) == FLOOR


def test_first_samples_cut_along_each_inputs_batch_axis():
    feeds = {"x": np.zeros((10, 3)), "t": np.zeros((2, 10)), "static": np.zeros((5,))}
    cut = first_samples(feeds, 4, axes={"x": 0, "t": 1, "static": None})
    assert {k: v.shape for k, v in cut.items()} == {"x": (4, 3), "t": (2, 4), "static": (5,)}


def _grounded(*samples: int, error: float = 1e-4) -> Rounding:
    return Rounding(error={"logits": error}, grounded=samples, ops=10)


@pytest.mark.parametrize(
    ("grounded", "failing", "expected"),
    [
        pytest.param((0, 1, 2, 3), {6: 3.0}, [6], id="only-an-ungrounded-sample-fails"),
        pytest.param((0, 1, 2, 3), {2: 1.5, 6: 30.0}, [], id="a-grounded-sample-fails-with-its-own-rounding"),
        pytest.param((0, 1, 2, 3), {i: float(i) for i in range(4, 12)}, [8, 9, 10, 11], id="the-worst-first"),
        pytest.param(tuple(range(MAX_GROUNDED - 2)), {20: 2.0, 21: 3.0, 22: 4.0}, [21, 22],
                     id="never-beyond-the-cap"),
        pytest.param(tuple(range(MAX_GROUNDED)), {20: 2.0}, [], id="the-cap-reached"),
        pytest.param((0, 1, 2, 3), {}, [], id="nothing-fails"),
    ],
)
def test_which_samples_are_grounded_next(grounded, failing, expected):
    assert _grounded(*grounded).to_ground(failing) == expected


def test_without_a_float64_run_nothing_more_is_grounded():
    assert Rounding(ops=10, fallback="no float64 kernel").to_ground({6: 2.0}) == []


def test_widening_keeps_the_larger_distance_and_every_sample():
    wider = _grounded(0, 1, 2, 3, error=1e-6).widened(
        Rounding(error={"logits": 2e-4, "other": 1e-7}, grounded=(6,), ops=10))
    assert wider.error == {"logits": 2e-4, "other": 1e-7}
    assert wider.grounded == (0, 1, 2, 3, 6)
    assert wider.summary()["failed_and_grounded"] == [6]
    fallback = Rounding(ops=10, fallback="more than rounding")
    assert _grounded(0, 1).widened(fallback) == fallback  # what the float64 run shows on any sample stands
