"""Batch invariance for any runtime given as a runner: numpy runners stand in for the runtimes, one per way a
runtime can honour or break the contract (each sample's outputs in a batch equal its outputs alone)."""

import numpy as np
import pytest

from skewgate.common.batching import batch_invariance, batch_runs
from skewgate.common.compare import Tolerance, batch_sizes

EXACT = Tolerance(rtol=0.0, atol=0.0)
FLOAT32 = Tolerance.for_dtype("float32")


def feeds(n=5):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((n, 4)).astype(np.float32), "mask": np.ones((n, 4), np.float32)}


class Recorder:
    """A runner that keeps the batch sizes it was called with."""

    def __init__(self, fn):
        self.fn, self.sizes = fn, []

    def __call__(self, inputs):
        self.sizes.append(len(inputs["x"]))
        return self.fn(inputs)


def per_sample(inputs):
    """Two outputs, each computed sample by sample: batch invariant."""
    x = inputs["x"] * inputs["mask"]
    return [x * 2.0, x.sum(axis=1, keepdims=True)]


def batch_mean(inputs):
    """The second output subtracts the batch mean: samples leak into each other."""
    x = inputs["x"] * inputs["mask"]
    return [x * 2.0, x.sum(axis=1, keepdims=True) - x.sum(axis=1, keepdims=True).mean()]


def test_a_per_sample_runtime_passes_with_no_variation():
    run = Recorder(per_sample)
    check, variation = batch_invariance("ort", run, feeds(5), ["y", "total"], {"y": EXACT, "total": EXACT},
                                       dynamic=True)
    assert check.name == "batch_invariance.ort" and check.passed
    assert (check.value, check.limit) == (0.0, 1.0)
    assert check.detail == "sizes [3, 5] vs each sample alone (y rtol 0, atol 0; total rtol 0, atol 0); " \
                           "worst: batch invariant"
    assert variation == {"y": 0.0, "total": 0.0}
    assert run.sizes == [1, 1, 1, 1, 1, 3, 5]  # each sample alone, then each larger batch size once


def test_the_whole_batch_given_is_not_run_again_and_is_judged():
    """export passes the whole-batch outputs it already has: the largest size is not run again, and a whole
    batch that differs from the samples alone still fails."""
    run = Recorder(per_sample)
    whole = [np.zeros((5, 4)), np.zeros((5, 1))]
    check, _ = batch_invariance("ort", run, feeds(5), ["y", "total"], {"y": EXACT, "total": EXACT},
                                dynamic=True, whole=whole)
    assert run.sizes == [1, 1, 1, 1, 1, 3]
    assert not check.passed and "batch 5" in check.detail


def test_each_runner_call_gets_every_input_sliced_alike():
    seen = []

    def run(inputs):
        seen.append({k: v.copy() for k, v in inputs.items()})
        return per_sample(inputs)

    given = feeds(3)
    batch_invariance("ort", run, given, ["y", "total"], {"y": EXACT, "total": EXACT}, dynamic=True)
    for i in range(3):  # the singles: sample i of each input, batch dimension kept
        for name in given:
            np.testing.assert_array_equal(seen[i][name], given[name][i:i + 1])
    assert [len(s["x"]) for s in seen[3:]] == [len(s["mask"]) for s in seen[3:]] == [3]


def test_samples_leaking_into_each_other_fail_naming_the_batch_and_the_output():
    check, variation = batch_invariance("torch", batch_mean, feeds(5), ["y", "total"], {"y": FLOAT32,
                                        "total": FLOAT32}, dynamic=True)
    # alone, a sample's total minus its own mean is 0; in a batch of `size` it is its total minus the batch mean
    totals = feeds(5)["x"].sum(axis=1).astype(np.float64)
    apart = {size: np.abs(totals[:size] - totals[:size].mean()).max() for size in (3, 5)}
    worst = max(apart, key=apart.get)
    assert not check.passed and check.value > 1.0
    assert f"worst: batch {worst}, output total: max |a-e| {apart[worst]:.3g}" in check.detail
    assert variation["y"] == 0.0
    assert variation["total"] == pytest.approx(apart[worst], rel=1e-5)  # the largest |batched − alone|


def test_each_output_is_judged_with_its_own_tolerance():
    loose = Tolerance(rtol=0.0, atol=1e3)
    check, variation = batch_invariance("torch", batch_mean, feeds(5), ["y", "total"], {"y": EXACT,
                                        "total": loose}, dynamic=True)
    assert check.passed and 0.0 < check.value < 1e-2
    assert variation["total"] > 0.0  # reported even within tolerance: the runtime's own variation
    assert "total rtol 0, atol 1e+03" in check.detail and "worst: batch 5, output total" in check.detail


def test_variation_within_tolerance_is_reported_and_passes():
    def wobble(inputs):  # a batch-size-dependent rounding-sized change, as a real kernel choice makes
        x = inputs["x"]
        return [x + np.float32(1e-6) * (len(x) - 1)]

    check, variation = batch_invariance("ort", wobble, feeds(5), ["y"], {"y": FLOAT32}, dynamic=True)
    assert check.passed and 0.0 < check.value <= 1.0
    assert variation["y"] == pytest.approx(4e-6, rel=0.05)  # batch 5: 4 × 1e-6


def test_a_runtime_dropping_a_sample_fails_on_the_shape():
    def drops_last(inputs):
        x = inputs["x"]
        return [x[:-1] if len(x) > 1 else x]

    check, variation = batch_invariance("ort", drops_last, feeds(5), ["y"], {"y": FLOAT32}, dynamic=True)
    assert not check.passed and check.value is None  # infinitely far: no finite figure
    assert "worst: batch 3, output y: shape (2, 4) != expected (3, 4)" in check.detail
    assert variation["y"] == np.inf


def test_a_static_batch_is_not_evaluated_and_fails_without_running():
    run = Recorder(per_sample)
    check, variation = batch_invariance("torch", run, feeds(5), ["y", "total"], {"y": EXACT, "total": EXACT},
                                       dynamic=False)
    assert check.name == "batch_invariance.torch" and not check.passed
    assert check.detail == "not evaluated: the batch dimension is static"
    assert check.value is None and variation == {}
    assert run.sizes == []


@pytest.mark.parametrize("n, sizes", [
    pytest.param(2, [2], id="two"),
    pytest.param(3, [3], id="three"),
    pytest.param(8, [5, 8], id="even"),
])
def test_the_batch_sizes_are_an_odd_size_and_all_beside_each_sample_alone(n, sizes):
    run = Recorder(per_sample)
    check, _ = batch_invariance("ort", run, feeds(n), ["y", "total"], {"y": EXACT, "total": EXACT}, dynamic=True)
    assert check.passed and check.detail.startswith(f"sizes {sizes} vs each sample alone")
    assert run.sizes == [1] * n + sizes


def test_one_example_input_is_not_judged_and_fails():
    """What was not judged is never a pass: one sample has no batch to compare with itself alone."""
    run = Recorder(per_sample)
    check, variation = batch_invariance("ort", run, feeds(1), ["y", "total"], {"y": EXACT, "total": EXACT},
                                        dynamic=True)
    assert not check.passed and check.detail.startswith("not evaluated: 1 example input")
    assert run.sizes == [] and variation == {}


def test_outputs_are_matched_by_position_to_the_names():
    def swapped_in_batches(inputs):  # alone: [a, b]; batched: the same arrays in the other order
        a, b = per_sample(inputs)
        b = np.repeat(b, 4, axis=1)
        return [a, b] if len(inputs["x"]) == 1 else [b, a]

    check, _ = batch_invariance("ort", swapped_in_batches, feeds(3), ["first", "second"],
                                {"first": EXACT, "second": EXACT}, dynamic=True)
    assert not check.passed and "output first" in check.detail


def test_the_samples_that_differ_batched_are_named_with_their_worst_ratio():
    """What export grounds next (`rounding.to_ground`): every sample whose batched outputs are out of tolerance
    at some size, by index, and no other."""
    runs = batch_runs(batch_mean, feeds(5))
    totals = feeds(5)["x"].sum(axis=1).astype(np.float64)
    atol = 1e-3
    failing = runs.failing(["y", "total"], {"y": EXACT, "total": Tolerance(rtol=0.0, atol=atol)})
    expected = {}
    for size in batch_sizes(5):
        for i, gap in enumerate(np.abs(totals[:size] - totals[:size].mean())):
            if gap > atol:
                expected[i] = max(expected.get(i, 0.0), gap / atol)
    assert expected and failing == pytest.approx(expected, rel=1e-4)
    assert runs.failing(["y", "total"], {"y": EXACT, "total": Tolerance(rtol=0.0, atol=1e3)}) == {}


@pytest.mark.parametrize(("k", "passes"), [pytest.param(0.95, True, id="just-inside"),
                                           pytest.param(1.05, False, id="just-outside")])
def test_a_batched_difference_is_judged_at_its_tolerance(k, passes):
    """float32's tolerance (rtol 1.3e-6, atol 1e-5): one element of one sample moves by k times what it allows,
    only when batched. The check decides at k = 1, not ten times away."""
    tol = Tolerance(rtol=1.3e-6, atol=1e-5)

    def batch_dependent(inputs):
        y, total = (a.astype(np.float64) for a in per_sample(inputs))
        if len(y) > 1:
            y[1, 2] += k * (tol.atol + tol.rtol * abs(y[1, 2]))
        return [y, total]

    check, variation = batch_invariance("ort", batch_dependent, feeds(5), ["y", "total"], {"y": tol, "total": tol},
                                        dynamic=True)
    assert check.passed is passes
    assert check.value == pytest.approx(k, rel=1e-6)
    assert variation["y"] == pytest.approx(k * (tol.atol + tol.rtol * abs(float(per_sample(feeds(5))[0][1, 2]))),
                                           rel=1e-6)
