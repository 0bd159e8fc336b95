"""Streaming: the verdict does not depend on how the rows are batched, split over files or split over tasks."""

import numpy as np
import pytest

from skewgate.drift.core import DriftOptions, decide, drift_gate, make_profile, summarise_current
from skewgate.drift.stats.profile import load_profile, save_profile
from skewgate.drift.stats.source import open_source
from skewgate.drift.stats.stream import load_partial, merge, save_partial
from tests.drift.conftest import make_frame

N = 2400


def _partitioned(tmp_path, name, frame, parts=3):
    root = tmp_path / name
    for k, chunk in enumerate(np.array_split(np.arange(len(frame)), parts)):
        (root / f"hour={k:02d}").mkdir(parents=True)
        frame.iloc[chunk].to_parquet(root / f"hour={k:02d}" / "part-0.parquet")
    return root


@pytest.mark.parametrize("current", [{}, {"shift": 0.3}, {"corr": True}], ids=["no-drift", "shift", "correlation"])
def test_a_partitioned_dataset_and_small_batches_give_the_one_file_verdict(write, tmp_path, current):
    ref, cur = make_frame(N, seed=1), make_frame(N, seed=2, **current)
    one = drift_gate(reference=write("ref", ref), current=write("cur", cur))
    split = drift_gate(reference=_partitioned(tmp_path, "ref_ds", ref), current=_partitioned(tmp_path, "cur_ds", cur),
                       options=DriftOptions(batch_rows=257))
    assert split.verdict.status == one.verdict.status
    assert [(c.name, c.passed) for c in split.verdict.checks] == [(c.name, c.passed) for c in one.verdict.checks]
    assert [c.value for c in split.verdict.checks] == pytest.approx([c.value for c in one.verdict.checks])
    assert {r["feature"]: r["statistic"] for r in split.features} == pytest.approx(
        {r["feature"]: r["statistic"] for r in one.features})


@pytest.mark.parametrize("current", [{}, {"shift": 0.3}], ids=["no-drift", "shift"])
def test_partials_merged_over_shards_decide_as_one_pass(tmp_path, current):
    """What the fan-out does: one partial per shard of files, merged, against the saved profile."""
    options = DriftOptions(exact_rows=1000, sketch_capacity=512, batch_rows=500, mmd_max_rows=3000)
    reference = _partitioned(tmp_path, "ref", make_frame(4 * N, seed=1))
    profile_path = save_profile(make_profile(reference, options=options), tmp_path / "ref.profile")
    snapshot = _partitioned(tmp_path, "cur", make_frame(3 * N, seed=2, **current), parts=5)
    one = drift_gate(reference=profile_path, current=snapshot, options=options)

    profile, files = load_profile(profile_path), open_source(snapshot).files
    rows = open_source(snapshot).count_rows()
    paths = [save_partial(summarise_current(profile, snapshot, options=options, files=files[k::2], rows=rows),
                          tmp_path / f"partial-{k}") for k in range(2)]
    merged = merge(load_partial(paths[0]), load_partial(paths[1]), capacity=options.sketch_capacity,
                   exact_rows=options.exact_rows)
    fanned = decide(profile, merged, options=options, from_profile=True, current=str(snapshot))

    assert merged.rows == 3 * N and merged.mmd_rows == one.verdict.details["mmd"]["rows"]["current"] < 3 * N
    assert fanned.verdict.status == one.verdict.status
    assert [(c.name, c.passed) for c in fanned.verdict.checks] == [(c.name, c.passed) for c in one.verdict.checks]
    bound = fanned.verdict.details["ks_error_bound"] + one.verdict.details["ks_error_bound"]
    assert 0 < bound < 0.02
    single = {r["feature"]: r["statistic"] for r in one.features}
    for row in fanned.features:
        assert row["statistic"] == pytest.approx(single[row["feature"]], abs=bound + 1e-12)
    assert fanned.verdict.details["mmd"]["value"] == pytest.approx(one.verdict.details["mmd"]["value"], rel=1e-6)
    assert fanned.coverage == pytest.approx(one.coverage)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_coverage_from_sorted_columns_equals_binning_each_value(seed):
    """The one-sort path (columns sorted for the sketches, eleven binary searches a feature) counts exactly what
    binning every value does: values on the edges themselves, repeated edges (ties in the deciles), ±Inf and
    NaN included."""
    from skewgate.drift.stats.source import Batch
    from skewgate.drift.stats.stream import Accumulator

    rng = np.random.default_rng(seed)
    values = np.round(rng.standard_normal((4_000, 3)), 1).astype(np.float32)  # a 0.1 grid: many ties
    values[rng.integers(0, 4_000, 50), 0] = np.nan
    values[rng.integers(0, 4_000, 20), 1] = np.inf
    values[rng.integers(0, 4_000, 20), 2] = -np.inf
    edges = np.quantile(np.round(rng.standard_normal((3, 500)), 1), np.linspace(0, 1, 11), axis=1).T
    edges[1, 4] = edges[1, 5]  # a repeated edge
    names = ("a", "b", "c")
    counted = []
    for tables in (True, False):  # tables: the batch is sorted, and coverage counts from the sorted columns
        acc = Accumulator(names, names, (), seed=0, exact_rows=1 << 16, capacity=4096, edges=edges, tables=tables)
        acc.add(Batch(origin="x", numeric=values, categorical={}))
        counted.append(acc.coverage.copy())
    np.testing.assert_array_equal(counted[0], counted[1])
    assert counted[0].sum(axis=1).tolist() == [4_000] * 3 and counted[0][0, 12] > 0


@pytest.mark.parametrize("shape", [(1, 1), (5_000, 1), (5_000, 3), (300, 512), (1_000, 700)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_sorted_rows_are_each_column_sorted(shape):
    """The blocked transpose (blocks sized by the width, a last block cut short) and the sort on every core
    give each column, sorted, as a row."""
    from skewgate.drift.stats.stream import _sorted_rows

    values = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(_sorted_rows(values), np.sort(values.T, axis=1))


def test_moments_from_the_sorted_columns_equal_the_batch_moments():
    """The MMD standardisation from the sorted columns (finite values only, as `_add_moments` counts them)
    equals the one from the batch, NaN and ±Inf included, over several batches merged."""
    from skewgate.drift.stats.source import Batch
    from skewgate.drift.stats.stream import Accumulator

    rng = np.random.default_rng(3)
    names = ("a", "b", "c", "d")
    values = (rng.standard_normal((6_000, 4)) * [1, 10, 1e-3, 1] + [0, 5, 1e4, 0]).astype(np.float32)
    values[rng.integers(0, 6_000, 40), 0] = np.nan
    values[rng.integers(0, 6_000, 10), 1] = np.inf
    values[:, 3] = np.nan  # a column with no finite value
    moments = []
    for tables in (True, False):  # tables: the batch is sorted, and the moments come from the sorted columns
        acc = Accumulator(names, names, (), seed=0, exact_rows=1 << 16, capacity=4096, sample_rows=100,
                          tables=tables)
        for start in range(0, 6_000, 2_500):
            acc.add(Batch(origin="x", numeric=values[start:start + 2_500], categorical={}))
        moments.append(acc.moments)
    np.testing.assert_allclose(moments[0], moments[1], rtol=1e-6)
    finite = np.where(np.isfinite(values), values, np.nan).astype(np.float64)
    np.testing.assert_allclose(moments[0][0], np.isfinite(values).sum(axis=0))
    np.testing.assert_allclose(moments[0][1, :3], np.nanmean(finite[:, :3], axis=0), rtol=1e-6)


@pytest.mark.parametrize("exact", [pytest.param(False, id="saved-profile"), pytest.param(True, id="two-dataset")])
@pytest.mark.parametrize("mmd_max_rows", [pytest.param(100_000, id="every-row"), pytest.param(700, id="a-share")])
def test_a_reference_read_once_gives_the_mmd_a_second_read_gives(write, monkeypatch, caplog, exact, mmd_max_rows):
    """make_profile keeps the rows MMD draws in its first pass and maps them once the standardisation is known;
    over the budget it reads the reference again. Both give the same mean embedding, rows and kept rows."""
    import logging

    from skewgate.drift.stats import stream

    path = write("ref", make_frame(3_000, seed=4))
    options = DriftOptions(mmd_max_rows=mmd_max_rows, batch_rows=1_000)
    profiles = []
    for budget in (stream.SELECT_BUDGET, 0):  # 0: nothing fits, a second pass
        monkeypatch.setattr(stream, "SELECT_BUDGET", budget)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="skewgate.drift.core"):
            profiles.append(make_profile(path, options=options, exact=exact))
        assert ("reading the reference again" in caplog.text) == (budget == 0)
    once, twice = profiles
    assert once.mmd_rows == twice.mmd_rows and (once.mmd_rows == 3_000) == (mmd_max_rows > 3_000)
    assert once.mmd_rows > 0
    np.testing.assert_array_equal(once.mean_embedding, twice.mean_embedding)
    if exact:
        np.testing.assert_array_equal(once.extra["raw_reference"], twice.extra["raw_reference"])


def test_the_mmd_sample_is_the_same_in_one_batch_or_several():
    """The rows with the smallest keys, whether each batch's own smallest are picked first or not: a batch of
    every row and five batches keep the same rows in the same order."""
    from skewgate.drift.stats.source import Batch
    from skewgate.drift.stats.stream import Accumulator

    values = np.random.default_rng(5).standard_normal((5_000, 3)).astype(np.float32)
    samples = []
    for batch in (5_000, 1_000):
        acc = Accumulator(("a", "b", "c"), ("a", "b", "c"), (), seed=0, exact_rows=1 << 16, capacity=4096,
                          sample_rows=300)
        for start in range(0, 5_000, batch):
            acc.add(Batch(origin="x", numeric=values[start:start + batch], categorical={}))
        samples.append((acc.sample, acc.sample_keys))
    np.testing.assert_array_equal(samples[0][0], samples[1][0])
    np.testing.assert_array_equal(samples[0][1], samples[1][1])
    assert len(samples[0][0]) == 300
