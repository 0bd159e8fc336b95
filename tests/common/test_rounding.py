"""Tolerances grounded in the model's own float32 rounding: measured against a float64 run, never tighter than
the floor, and a documented size-aware fallback where the float64 run cannot stand in for the exact result."""

import math

import numpy as np
import pytest

from skewgate.common.compare import Tolerance
from skewgate.common.rounding import FACTOR, beside, first_samples, measure

FLOOR = Tolerance(rtol=1.3e-6, atol=1e-5)


def _values(noise: float) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    exact = np.random.default_rng(0).normal(size=(4, 10)) * 30.0
    narrow = (exact + noise * np.sign(exact)).astype(np.float32)
    return {"logits": narrow, "ids": np.arange(4)}, {"logits": exact, "ids": np.arange(4)}


def test_the_tolerance_is_the_rounding_pytorch_itself_has_times_the_documented_factor():
    narrow, wide = _values(3e-4)
    rounding = measure(narrow, lambda: wide, samples=4, ops=50)
    error = rounding.error["logits"]
    assert 3e-4 <= error < 3.1e-4
    assert "ids" not in rounding.error  # integers are exact: nothing to ground
    tolerance = rounding.tolerance("logits", FLOOR)
    assert tolerance == Tolerance(rtol=FLOOR.rtol, atol=(FACTOR + 1) * error)
    assert rounding.summary()["method"] == "float64 reference"


def test_grounding_never_tightens_below_the_floor():
    narrow, wide = _values(0.0)
    rounding = measure(narrow, lambda: wide, samples=4, ops=50)
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
    rounding = measure(narrow, float64, samples=4, ops=100)
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
