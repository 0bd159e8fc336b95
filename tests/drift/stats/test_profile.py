"""The saved reference profile: what a nightly run reads back months after promotion must be what was built."""

import json

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.drift.core import DriftOptions, make_profile
from skewgate.drift.stats.profile import (
    PROFILE_VERSION,
    QuantileSketch,
    decile_edges,
    is_profile,
    load_profile,
    save_profile,
    standardise,
)
from tests.drift.conftest import make_frame


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "ref.parquet"
    make_frame(1500, seed=1).to_parquet(path)
    return make_profile(path, options=DriftOptions(sketch=128), exact=True)


def test_a_saved_profile_loads_back_as_built(built, tmp_path):
    saved = built.sketched(128)
    loaded = load_profile(save_profile(saved, tmp_path / "ref.profile"))  # no .npz suffix is added
    assert (tmp_path / "ref.profile").is_file()
    for name in ("dtypes", "numeric_names", "rows", "sha256", "seed", "nan_share", "categories", "mmd_space",
                 "mmd_rows"):
        assert getattr(loaded, name) == getattr(saved, name), name
    for name in ("edges", "center", "scale", "mean_embedding", "covariance"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(saved, name), err_msg=name)
    np.testing.assert_array_equal(loaded.features.weights, saved.features.weights)
    assert loaded.features.bandwidths == saved.features.bandwidths
    assert [(s.n, s.complete) for s in loaded.sketches] == [(s.n, s.complete) for s in saved.sketches]
    assert loaded.ks_error_bound == saved.ks_error_bound
    assert len(loaded.extra["profile_sha256"]) == 64  # the file's own digest, for the verdict


def test_sketched_drops_the_raw_rows_and_bounds_the_ks_error(built):
    assert "raw_reference" in built.extra and built.ks_error_bound == 0  # in memory: every value, exact
    saved = built.sketched(128)
    assert "raw_reference" not in saved.extra
    assert 0 < saved.ks_error_bound < 0.05
    assert "raw_reference" in built.extra  # the in-memory profile is untouched


def test_is_profile_tells_profiles_from_other_files(built, tmp_path):
    np.savez(tmp_path / "data.npz", x=np.zeros(3))
    (tmp_path / "table.csv").write_text("a\n1\n")
    assert is_profile(save_profile(built.sketched(128), tmp_path / "ref.profile"))
    assert not is_profile(tmp_path / "data.npz")
    assert not is_profile(tmp_path / "table.csv")
    assert not is_profile(tmp_path / "missing.profile")


def _rewrite_header(path, **changes):
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    header = json.loads(str(arrays["header"])) | changes
    with path.open("wb") as handle:
        np.savez(handle, **(arrays | {"header": np.array(json.dumps(header))}))


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        pytest.param(lambda p: _rewrite_header(p, version=1), "rebuild it", id="older-version"),
        pytest.param(lambda p: _rewrite_header(p, version=2, categories={"token": {"7": 3, "(other)": 9}}),
                     r"v2, whose id features \['token'\] kept the ids their own tested counts ranked",
                     id="v2-with-ids-ranked-on-tested-counts"),
        pytest.param(lambda p: _rewrite_header(p, schema="something-else"), "skewgate.drift-profile",
                     id="other-schema"),
        pytest.param(lambda p: p.write_bytes(b"not a zip"), "a skewgate drift profile", id="not-an-archive"),
    ],
)
def test_a_profile_that_cannot_be_trusted_is_bad_input(built, tmp_path, spoil, message):
    path = save_profile(built.sketched(128), tmp_path / "ref.profile")
    spoil(path)
    with pytest.raises(InputError, match=message):
        load_profile(path)


def test_a_v2_profile_without_cut_ids_still_loads(built, tmp_path):
    """Version 3 changed only how id features are cut: a v2 profile without them decides as before."""
    path = save_profile(built.sketched(128), tmp_path / "ref.profile")
    _rewrite_header(path, version=PROFILE_VERSION - 1)
    assert load_profile(path).categories == built.categories


def test_standardise_puts_holes_at_the_reference_mean():
    z = standardise(np.array([[1.0, np.nan], [3.0, np.inf]]), center=np.array([2.0, 0.0], dtype=np.float32),
                    scale=np.array([2.0, 1.0], dtype=np.float32))
    np.testing.assert_array_equal(z, [[-0.5, 0.0], [0.5, 0.0]])


def test_decile_edges_run_from_min_to_max_and_are_nan_without_values():
    edges = decile_edges(QuantileSketch.of(np.arange(101, dtype=np.float64)))
    np.testing.assert_allclose(edges, np.linspace(0, 100, 11))
    assert np.isnan(decile_edges(QuantileSketch.of(np.array([], dtype=np.float64)))).all()
