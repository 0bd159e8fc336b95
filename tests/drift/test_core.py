import numpy as np
import pandas as pd
import pytest

from skewgate.common.errors import InputError
from skewgate.drift.core import DriftOptions, drift_gate, make_profile
from skewgate.drift.stats.profile import load_profile, save_profile
from tests.drift.conftest import make_frame

N = 2000


STREAMED = DriftOptions(exact_rows=500, sketch_capacity=256, permutation_max_rows=0, batch_rows=300)


@pytest.mark.parametrize("options", [DriftOptions(), STREAMED], ids=["in-memory", "streamed"])
@pytest.mark.parametrize(
    ("current", "status", "flagged"),
    [
        pytest.param({}, "pass", set(), id="no-drift"),
        pytest.param({"cat_probs": (0.2, 0.3, 0.5)}, "warn", {"ks_drift"}, id="ks-only-category-shift"),
        pytest.param({"corr": True}, "warn", {"mmd_drift"}, id="mmd-only-correlation"),
        pytest.param({"shift": 0.5}, "fail", {"ks_drift", "mmd_drift", "joint_drift"}, id="both-mean-shift"),
    ],
)
def test_decision_matrix(write, current, status, flagged, options):
    """In memory: exact KS, permutation MMD. Streamed: sketches, random-feature means and the Gaussian null."""
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)),
                        current=write("cur", make_frame(N, seed=2, **current)), options=options)
    assert result.verdict.status == status
    assert {c.name for c in result.verdict.failed_checks} == flagged


def test_per_feature_table_names_the_drifted_feature_first(write):
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)),
                        current=write("cur", make_frame(N, seed=2, shift=0.5)))
    top = result.features[0]
    assert top["feature"] == "f2" and top["drifted"]
    assert {"statistic", "pvalue", "adjusted_pvalue", "effect"} <= set(top)
    assert not any(row["drifted"] for row in result.features[1:])


def test_verdict_details_keep_the_keys_their_readers_use(write, tmp_path):
    """MLflow's nightly history and the Pushgateway read `mmd`, `features` and `ks_error_bound` from the JSON;
    the typed details serialise to exactly the documented keys."""
    from skewgate.common.verdict import Verdict

    result = drift_gate(reference=write("ref", make_frame(500, seed=1)),
                        current=write("cur", make_frame(500, seed=2)), options=DriftOptions(seed=4))
    details = Verdict.read(result.verdict.write(tmp_path / "drift.json")).details
    assert set(details) == {"seed", "options", "reference_from_profile", "ks_error_bound", "rows", "mmd",
                            "constant_features", "features", "period"}
    assert details["period"] is None  # a profile of one data set
    assert set(details["mmd"]) == {"value", "pvalue", "method", "space", "bandwidths", "rows"}
    assert details["rows"] == {"reference": 500, "current": 500} == details["mmd"]["rows"]
    assert details["options"]["seed"] == details["seed"] == 4 and details["options"]["correction"] == "bh"
    assert [row["feature"] for row in details["features"]] == [row["feature"] for row in result.features]


def test_effect_floor_keeps_a_huge_sample_from_blocking_on_a_trivial_shift(write):
    big = 60_000
    ref, cur = make_frame(big, seed=1), make_frame(big, seed=2, shift=0.04)
    floored = drift_gate(reference=write("ref", ref), current=write("cur", cur))
    unfloored = drift_gate(reference=write("ref", ref), current=write("cur", cur),
                           options=DriftOptions(min_effect=0.0))
    f2 = next(r for r in unfloored.features if r["feature"] == "f2")
    assert f2["adjusted_pvalue"] < 0.05 and f2["effect"] < 0.05  # significant, but tiny
    assert f2["drifted"]
    assert not any(r["drifted"] for r in floored.features)


def test_profile_matches_raw_reference_within_the_stated_bound(write, tmp_path):
    ref = write("ref", make_frame(N, seed=1))
    cur = write("cur", make_frame(N, seed=2, shift=0.15))
    raw = drift_gate(reference=ref, current=cur)
    path = save_profile(make_profile(ref, options=DriftOptions(sketch=256)), tmp_path / "ref.profile")
    profiled = drift_gate(reference=path, current=cur)
    bound = load_profile(path).ks_error_bound
    assert 0 < bound <= 1 / 256 + 2 / N
    raw_d = {r["feature"]: r["statistic"] for r in raw.features if r["test"] == "ks"}
    for row in profiled.features:
        if row["test"] == "ks":
            assert abs(row["statistic"] - raw_d[row["feature"]]) <= bound + 1e-12
    assert profiled.verdict.details["mmd"]["value"] == pytest.approx(raw.verdict.details["mmd"]["value"], rel=0.05)
    assert profiled.verdict.status == raw.verdict.status


def test_same_seed_same_verdict_and_the_seed_is_recorded(write):
    ref, cur = write("ref", make_frame(N, seed=1)), write("cur", make_frame(N, seed=2, corr=True))
    first = drift_gate(reference=ref, current=cur, options=DriftOptions(seed=7))
    second = drift_gate(reference=ref, current=cur, options=DriftOptions(seed=7))
    assert first.verdict.checks == second.verdict.checks
    assert first.verdict.details["seed"] == 7


def test_nan_share_change_is_its_own_check(write):
    cur = make_frame(N, seed=2)
    cur.loc[: N // 5, "f4"] = np.nan
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)), current=write("cur", cur))
    check = next(c for c in result.verdict.checks if c.name == "nan_share")
    assert not check.passed and "'f4'" in check.detail
    assert result.coverage[4, 12] == pytest.approx(0.2, abs=0.01)  # the NaN bin of f4


@pytest.mark.parametrize("options", [DriftOptions(), STREAMED], ids=["in-memory", "streamed"])
@pytest.mark.parametrize(("side", "value", "why"), [
    ("current", np.nan, "no finite value in the current data"),
    ("reference", np.nan, "no finite value in the reference"),
    ("current", np.inf, "no finite value in the current data"),
    ("current", -np.inf, "no finite value in the current data"),
], ids=["all-nan-tonight", "all-nan-reference", "all-inf-tonight", "all-minus-inf-tonight"])
def test_a_column_without_a_finite_value_is_not_judged_and_says_so(write, side, value, why, options):
    """#33 item 4: an exit 1 with a traceback before (a NaN p-value reached strict JSON). Now the feature is
    `not testable`, which fails the gate (what was not judged is never a pass), and the report is written."""
    ref, cur = make_frame(N, seed=1), make_frame(N, seed=2)
    (ref if side == "reference" else cur)["f4"] = value
    result = drift_gate(reference=write("ref", ref), current=write("cur", cur), options=options)
    row = next(r for r in result.features if r["feature"] == "f4")
    assert row["pvalue"] is None and row["untestable"] == why and row["adjusted_pvalue"] is None
    check = next(c for c in result.verdict.checks if c.name == "testable")
    assert not check.passed and check.severity == "fail" and f"'f4' ({why})" in check.detail
    assert result.verdict.status == "fail" and result.verdict.message == "failed: testable"
    assert "f4" in result.verdict.to_json()  # strict JSON: no NaN anywhere
    assert not any(r["drifted"] for r in result.features)  # the other features are judged as before


def test_infinite_values_count_as_missing_and_leave_the_finite_ones_intact(write):
    """+Inf was dropped silently (and -Inf, sorted first, pushed the largest finite values out of the sketch)."""
    ref, cur = make_frame(N, seed=1), make_frame(N, seed=2)
    cur.loc[: N // 10 - 1, "f4"] = np.inf
    cur.loc[N // 10: N // 5 - 1, "f4"] = -np.inf
    result = drift_gate(reference=write("ref", ref), current=write("cur", cur), options=STREAMED)
    check = next(c for c in result.verdict.checks if c.name == "nan_share")
    assert check.value == pytest.approx(0.2) and "'f4'" in check.detail and not check.passed
    row = next(r for r in result.features if r["feature"] == "f4")
    assert row["current_n"] == N - N // 5 and not row["drifted"]  # the finite 80 % are a sample like any other
    assert result.coverage[4, 12] == pytest.approx(0.2)  # the last bin: missing or non-finite


@pytest.mark.parametrize(("rows", "testable"), [(1, False), (11, False), (12, True)],
                         ids=["1-row", "11-rows", "12-rows"])
def test_a_side_too_small_to_judge_is_not_testable(write, rows, testable):
    """#33 item 4: one current row failed at p = 0.0004. A KS feature is testable when a distance of 0.5 would
    reach alpha over the tests (9 here, 0.0056): 11 rows against 2,000 cannot (p 0.0084), 12 can (p 0.0051)."""
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)),
                        current=write("cur", make_frame(rows, seed=2)))
    numeric = [r for r in result.features if r["test"] == "ks"]
    assert all(("untestable" in r) is not testable for r in numeric)
    assert next(c for c in result.verdict.checks if c.name == "testable").passed is testable


def test_a_huge_shift_reports_a_floored_pvalue_with_its_exponent_never_zero(write):
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)),
                        current=write("cur", make_frame(N, seed=2, shift=50.0)))
    row = next(r for r in result.features if r["feature"] == "f2")
    assert row["pvalue"] > 0 and row["pvalue"] == pytest.approx(1e-300)
    assert row["log10_pvalue"] < -300 and row["drifted"]


def test_constant_columns_are_reported_not_crashed_on(write):
    ref, cur = make_frame(N, seed=1), make_frame(N, seed=2)
    ref["const"], cur["const"] = 3.0, 3.0
    result = drift_gate(reference=write("ref", ref), current=write("cur", cur))
    assert result.verdict.status == "pass"
    assert result.verdict.details["constant_features"] == ["const"]


def test_coverage_puts_a_units_bug_above_the_maximum(write):
    result = drift_gate(reference=write("ref", make_frame(N, seed=1)),
                        current=write("cur", make_frame(N, seed=2, scale_f3=1000.0)))
    assert result.coverage[3, 0] + result.coverage[3, 11] > 0.9  # below min or above max
    assert result.features[0]["feature"] == "f3"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda f: f.drop(columns=["f5"]), r"columns: expected the reference's columns .*missing \['f5'\]",
                     id="missing-column"),
        pytest.param(lambda f: f.assign(extra=1.0), r"extra \['extra'\]", id="extra-column"),
        pytest.param(lambda f: f.astype({"f1": str}), "f1: expected dtype float64 .*, found dtype object",
                     id="number-became-text"),
        pytest.param(lambda f: f.iloc[:0], "at least one row", id="empty"),
    ],
)
def test_schema_problems_are_input_errors(write, mutate, message):
    with pytest.raises(InputError, match=message):
        drift_gate(reference=write("ref", make_frame(N, seed=1)), current=write("cur", mutate(make_frame(N, seed=2))))


def test_npz_arrays_become_features(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "ref.npz", emb=rng.normal(size=(500, 4)).astype(np.float32))
    shifted = rng.normal(size=(500, 4)) + np.array([2.0, 0.0, 0.0, 0.0])
    np.savez(tmp_path / "cur.npz", emb=shifted.astype(np.float32))
    result = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "cur.npz")
    assert result.verdict.status == "fail"
    assert result.features[0]["feature"] == "emb[0]"


def test_embedding_space_mmd_from_an_onnx_output(tmp_path, tiny_onnx):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "ref.npz", x=rng.normal(size=(400, 4)).astype(np.float32))
    np.savez(tmp_path / "cur.npz", x=rng.normal(size=(400, 4)).astype(np.float32))
    result = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "cur.npz", embed_onnx=tiny_onnx,
                        embed_output="y")
    assert result.verdict.details["mmd"]["space"] == "embedding:y"
    assert result.verdict.subject.artifact == str(tiny_onnx)
    with pytest.raises(InputError, match="nope: expected a graph output"):
        drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "cur.npz", embed_onnx=tiny_onnx,
                   embed_output="nope")


def test_a_file_that_is_neither_table_nor_profile_is_bad_input(tmp_path, write):
    (tmp_path / "junk.npz").write_bytes(b"junk")
    with pytest.raises(InputError, match=r"junk\.npz"):
        drift_gate(reference=tmp_path / "junk.npz", current=write("cur", make_frame(10, seed=0)))
    frame = pd.DataFrame({"a": ["x", "y"]})
    with pytest.raises(InputError, match="at least one numeric feature"):
        drift_gate(reference=write("ref", frame), current=write("cur", frame))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_image_channels_are_the_features_and_pixels_are_pooled(tmp_path, layout):
    rng = np.random.default_rng(0)

    def images(n, shift):
        x = rng.normal(size=(n, 3, 6, 6)).astype(np.float32)
        x[:, 1] += shift  # one channel drifts at every pixel
        return x if layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))

    np.savez(tmp_path / "ref.npz", x=images(600, 0.0))
    np.savez(tmp_path / "same.npz", x=images(600, 0.0))
    np.savez(tmp_path / "shifted.npz", x=images(600, 0.3))
    same = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "same.npz")
    shifted = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "shifted.npz")
    assert sorted(r["feature"] for r in same.features) == ["x[0]", "x[1]", "x[2]"]
    assert same.verdict.status == "pass"
    assert shifted.verdict.status == "fail" and [r["feature"] for r in shifted.features if r["drifted"]] == ["x[1]"]
    assert shifted.coverage.shape == (3, 13) and shifted.coverage.sum(axis=1) == pytest.approx(1.0)
    declared = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "same.npz",
                          options=DriftOptions(feature_axes=(("x", 2),)))
    assert len(declared.features) == 6  # the declared axis (H of NCHW, W of NHWC) has 6 positions


def test_token_ids_are_categories_with_the_rare_ones_folded(write):
    rng = np.random.default_rng(1)
    # the same id range, different ids: the current data uses the odd ids where the reference used the even ones
    ref = pd.DataFrame({"token": rng.integers(0, 400, 4000) * 2, "f0": rng.normal(size=4000)})
    cur = pd.DataFrame({"token": rng.integers(0, 400, 4000) * 2 + 1, "f0": rng.normal(size=4000)})
    as_numbers = drift_gate(reference=write("ref", ref), current=write("cur", cur))
    as_ids = drift_gate(reference=write("ref", ref), current=write("cur", cur),
                        options=DriftOptions(ids=("token",), max_categories=100))
    numeric = next(r for r in as_numbers.features if r["feature"] == "token")
    token = next(r for r in as_ids.features if r["feature"] == "token")
    assert numeric["test"] == "ks" and not numeric["drifted"]
    assert token["test"] == "chi2" and token["drifted"] and token["effect"] > 0.3
    assert "(other)" in as_ids.profile.categories["token"] and len(as_ids.profile.categories["token"]) == 101
    with pytest.raises(InputError, match="f0: expected an integer or string column of ids"):
        drift_gate(reference=write("ref", ref), current=write("cur", cur), options=DriftOptions(ids=("f0",)))


def test_integer_inputs_of_the_model_are_ids_without_declaring_them(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["tokens"], ["t"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("t", TensorProto.INT64, ["batch", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "m.onnx"))
    rng = np.random.default_rng(3)
    np.savez(tmp_path / "ref.npz", x=rng.normal(size=(800, 3)).astype(np.float32),
             tokens=rng.integers(0, 50, (800, 8)) * 2)
    np.savez(tmp_path / "cur.npz", x=rng.normal(size=(800, 3)).astype(np.float32),
             tokens=rng.integers(0, 50, (800, 8)) * 2 + 1)  # other ids, the same range
    result = drift_gate(reference=tmp_path / "ref.npz", current=tmp_path / "cur.npz", model=tmp_path / "m.onnx")
    tokens = next(r for r in result.features if r["feature"] == "tokens")
    assert tokens["test"] == "chi2" and tokens["drifted"]
    assert {r["feature"] for r in result.features} == {"x[0]", "x[1]", "x[2]", "tokens"}
    assert result.profile.extra["layout"]["ids"] == ["tokens"]


def test_sketched_ks_pvalues_hold_their_level_and_a_shift_still_fails(write):
    """Beyond `exact_rows` KS reads sketches (here 256 values, so their error is near the critical D): the
    p-value of the midpoint D would put 20-30 % of unchanged features below 0.05; judged at the least D the
    sketches allow (≥ D − error) the share stays within sampling error of 0.05, and a 0.3σ shift still fails.
    What is reported (effect, p) is what was decided on."""
    from skewgate.drift.stats.ks import ks_pvalue

    rows, features = 20_000, 60
    rng = np.random.default_rng(5)
    columns = [f"f{i}" for i in range(features)]
    ref = pd.DataFrame(rng.normal(size=(rows, features)), columns=columns)
    cur = pd.DataFrame(rng.normal(size=(rows, features)), columns=columns)
    cur["f0"] += 0.3
    options = DriftOptions(exact_rows=2_000, sketch_capacity=256, permutation_max_rows=0, batch_rows=4_096)
    result = drift_gate(reference=write("ref", ref), current=write("cur", cur), options=options)
    null = [r for r in result.features if r["feature"] != "f0"]
    assert all(r["ks_error"] > 0 for r in null)  # the sketch path
    share = np.mean([r["pvalue"] < 0.05 for r in null])
    assert share <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(null))
    assert np.mean([ks_pvalue(r["statistic"], rows, rows) < 0.05 for r in null]) > share  # the midpoint's bias
    for row in result.features:
        assert max(row["statistic"] - row["ks_error"], 0.0) <= row["effect"] <= row["statistic"]
        assert row["pvalue"] == pytest.approx(ks_pvalue(row["effect"], rows, rows))
    assert [r["feature"] for r in result.features if r["drifted"]] == ["f0"]


def test_each_feature_reports_the_smallest_effect_it_could_flag(write):
    """`detectable`: the D (or Cramér's V) a lone drifted feature needs at its sample size, alpha / tests and the
    effect floor — what a pass cannot see."""
    from skewgate.drift.stats.ks import ks_pvalue

    small = drift_gate(reference=write("ref", make_frame(300, seed=1)), current=write("cur", make_frame(300, seed=2)))
    big = drift_gate(reference=write("ref", make_frame(N, seed=1)), current=write("cur", make_frame(N, seed=2)),
                     options=DriftOptions(min_effect=0.0))
    tests = len(small.features)
    for result, n in ((small, 300), (big, N)):
        for row in (r for r in result.features if r["test"] == "ks"):
            d = row["detectable"]
            assert ks_pvalue(d, n, n) <= 0.05 / tests < ks_pvalue(d * 0.99, n, n)
        color = next(r for r in result.features if r["feature"] == "color")
        assert 0 < color["detectable"] < 1
    assert next(r for r in small.features if r["feature"] == "f0")["detectable"] > 0.1  # 300 rows see little
    floored = drift_gate(reference=write("ref", make_frame(N, seed=1)), current=write("cur", make_frame(N, seed=2)),
                         options=DriftOptions(min_effect=0.2))
    assert {r["detectable"] for r in floored.features} == {0.2}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unchanged_ids_pass_in_both_modes(write, tmp_path, seed):
    """Zipf over 5,000 ids, 5,000 rows a side, the same distribution: the id feature passes with the raw
    reference and with its saved profile (before: it alarmed on every such pair), and the profile keeps the ids
    ranked on its other rows."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 5_001)
    p /= p.sum()

    def frame():
        return pd.DataFrame({"token": rng.choice(5_000, 5_000, p=p), "f0": rng.normal(size=5_000)})

    ref, cur = write("ref", frame()), write("cur", frame())
    options = DriftOptions(ids=("token",))
    raw = drift_gate(reference=ref, current=cur, options=options)
    path = save_profile(make_profile(ref, options=options), tmp_path / "ref.profile")
    profiled = drift_gate(reference=path, current=cur, options=options)
    assert load_profile(path).categories == raw.profile.categories
    split = raw.profile.extra["id_split"]
    assert split["share"] == 0.25 and 0 < split["features"]["token"]["kept"] <= 1_000  # ids the ranking rows saw
    assert split["features"]["token"]["ranking_values"] + split["features"]["token"]["tested_values"] == 5_000
    for result in (raw, profiled):
        token = next(r for r in result.features if r["feature"] == "token")
        assert token["test"] == "chi2" and not token["drifted"]


def _correlated(n, *, seed, rho):
    """4 standard-normal features; `rho` correlates f1 with f0 (MMD sees it, KS per feature does not)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4))
    x[:, 1] = rho * x[:, 0] + np.sqrt(1 - rho * rho) * x[:, 1]
    return pd.DataFrame(x, columns=[f"f{i}" for i in range(4)])


@pytest.fixture(scope="module")
def near_the_limits(tmp_path_factory):
    """Seeded pairs whose p-values sit between alpha/10 and alpha: a decision moved by a factor changes them."""
    tmp = tmp_path_factory.mktemp("limits")
    paths = {}
    for name, frame in (("ref", _correlated(600, seed=1, rho=0.0)), ("ks", _correlated(600, seed=3, rho=0.0)),
                        ("mmd", _correlated(600, seed=7, rho=0.25))):
        paths[name] = tmp / f"{name}.parquet"
        frame.to_parquet(paths[name])
    return paths


def test_ks_drifts_just_inside_its_corrected_limit_and_not_at_it(near_the_limits):
    result = drift_gate(reference=near_the_limits["ref"], current=near_the_limits["ks"])
    row = result.features[0]
    assert row["feature"] == "f2" and row["effect"] >= 0.05
    assert 0.005 < row["adjusted_pvalue"] < 0.05 and row["drifted"]  # inside: alpha / 10 would miss it
    at_it = drift_gate(reference=near_the_limits["ref"], current=near_the_limits["ks"],
                       options=DriftOptions(alpha_ks=row["adjusted_pvalue"]))
    assert not at_it.features[0]["drifted"]


def test_ks_decides_on_the_corrected_pvalue_not_the_raw_one(near_the_limits):
    result = drift_gate(reference=near_the_limits["ref"], current=near_the_limits["mmd"])
    row = result.features[0]
    assert row["pvalue"] < 0.05 < row["adjusted_pvalue"] and not row["drifted"]  # raw alone would flag it


def test_mmd_drifts_just_inside_its_limit_and_not_at_it(near_the_limits):
    """#33: moving the MMD alarm to alpha/10 passed every test before."""
    result = drift_gate(reference=near_the_limits["ref"], current=near_the_limits["mmd"])
    check = next(c for c in result.verdict.checks if c.name == "mmd_drift")
    assert 0.005 < check.value < 0.05 and not check.passed
    at_it = drift_gate(reference=near_the_limits["ref"], current=near_the_limits["mmd"],
                       options=DriftOptions(alpha_mmd=check.value))
    assert next(c for c in at_it.verdict.checks if c.name == "mmd_drift").passed
