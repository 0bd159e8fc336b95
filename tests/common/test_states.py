"""State pairs from `--state` flags and KFP parameters, the zero state, and an initial-state file read against the
state inputs: what each promises, and the `InputError` naming file, array, expected and found for each problem."""

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec
from skewgate.common.states import parse_states, read_initial_state, zero_state

# --- parse_states ---


@pytest.mark.parametrize("pairs, expected", [
    pytest.param([], {}, id="nothing-given"),
    pytest.param(["h=h_next"], {"h": "h_next"}, id="one-flag"),
    pytest.param(["h=h_next", "c=c_next"], {"h": "h_next", "c": "c_next"}, id="one-pair-per-flag"),
    pytest.param(["k=k_next,v=v_next"], {"k": "k_next", "v": "v_next"}, id="kfp-comma-separated"),
    pytest.param(["h=h_next", "k=k_next,v=v_next"], {"h": "h_next", "k": "k_next", "v": "v_next"}, id="mixed"),
    pytest.param([" h=h_next , c=c_next "], {"h": "h_next", "c": "c_next"}, id="space-around-pairs"),
    pytest.param(["", ",", "h=h_next,,", " , "], {"h": "h_next"}, id="empty-parts-skipped"),
    pytest.param(["h = h_next"], {"h": "h_next"}, id="space-around-equals"),
])
def test_pairs_map_each_state_input_to_its_next_value_output(pairs, expected):
    assert parse_states(pairs) == expected


def test_pairs_keep_the_order_given():
    assert list(parse_states(["z=z1", "a=a1,m=m1"])) == ["z", "a", "m"]


def test_a_generator_of_pairs_is_read_once():
    assert parse_states(p for p in ["h=h_next", "c=c_next"]) == {"h": "h_next", "c": "c_next"}


@pytest.mark.parametrize("pairs, found", [
    pytest.param(["h"], "'h'", id="no-equals"),
    pytest.param(["=h_next"], "'=h_next'", id="no-input"),
    pytest.param(["h="], "'h='", id="no-output"),
    pytest.param(["="], "'='", id="bare-equals"),
    pytest.param(["h=h_next,c"], "'c'", id="second-part-of-a-parameter"),
    pytest.param(["h=a=b"], "'h=a=b'", id="two-equals"),
])
def test_a_malformed_pair_names_the_flag_the_form_and_the_pair(pairs, found):
    with pytest.raises(InputError) as caught:
        parse_states(pairs)
    err = caught.value
    assert (err.source, err.field, err.found) == ("--state", None, found)
    assert err.expected.startswith("IN=OUT")
    assert str(err) == f"--state: expected {err.expected}, found {found}"


@pytest.mark.parametrize("pairs", [
    pytest.param(["h=a", "h=b"], id="two-flags"),
    pytest.param(["h=a,h=b"], id="one-parameter"),
    pytest.param(["h=a", "h=a"], id="same-pair-twice"),
])
def test_a_state_input_given_twice_is_named(pairs):
    with pytest.raises(InputError) as caught:
        parse_states(pairs)
    assert str(caught.value) == "--state: h: expected each state input once, found given twice"


# --- zero_state ---


@pytest.mark.parametrize("shape, batch, expected", [
    pytest.param((None, 8), 3, (3, 8), id="dynamic-batch"),
    pytest.param((2, None, 4), 5, (2, 5, 4), id="dynamic-middle"),
    pytest.param((None, None), 2, (2, 2), id="every-dynamic-dim"),
    pytest.param((1, 8), 7, (1, 8), id="static-unchanged"),
    pytest.param((), 4, (), id="scalar"),
])
def test_zero_state_takes_the_batch_for_each_dynamic_dimension(shape, batch, expected):
    state = zero_state(TensorSpec("h", "float32", shape), batch)
    assert state.shape == expected and state.dtype == np.float32
    assert not state.any()


@pytest.mark.parametrize("dtype", ["float16", "float64", "int64", "bool"])
def test_zero_state_has_the_spec_dtype(dtype):
    state = zero_state(TensorSpec("h", dtype, (None, 2)), 1)
    assert state.dtype == np.dtype(dtype) and state.shape == (1, 2) and not state.any()


# --- read_initial_state ---

SPECS = {"h": TensorSpec("h", "float32", (None, 8)), "c": TensorSpec("c", "float32", (None, 8))}


def batch_of_one(name, spec, array):
    """The shape rule a caller gives: one sample, the spec's static dimensions."""
    want = tuple(1 if d is None else d for d in spec.shape)
    return None if array.shape == want else f"shape {list(want)}"


def any_shape(name, spec, array):
    return None


def write(tmp_path, **arrays):
    path = tmp_path / "state0.npz"
    np.savez(path, **arrays)
    return path


def test_the_arrays_come_back_keyed_by_state_input_as_stored(tmp_path):
    h, c = np.arange(8, dtype=np.float32)[None], np.full((1, 8), -2.5, np.float32)
    state = read_initial_state(write(tmp_path, c=c, h=h), SPECS, shape=batch_of_one)
    assert set(state) == {"h", "c"}
    np.testing.assert_array_equal(state["h"], h)
    np.testing.assert_array_equal(state["c"], c)
    assert state["h"].dtype == np.float32


def test_the_shape_rule_is_asked_about_each_array_with_its_spec(tmp_path):
    asked = []

    def rule(name, spec, array):
        asked.append((name, spec, array.shape))
        return None

    read_initial_state(write(tmp_path, h=np.zeros((4, 8), np.float32), c=np.zeros((4, 8), np.float32)), SPECS,
                       shape=rule)
    assert asked == [("h", SPECS["h"], (4, 8)), ("c", SPECS["c"], (4, 8))]


def test_a_string_path_is_read_too(tmp_path):
    path = write(tmp_path, h=np.zeros((1, 8), np.float32))
    state = read_initial_state(str(path), {"h": SPECS["h"]}, shape=any_shape)
    assert list(state) == ["h"]


def test_arrays_of_no_state_input_are_named_together(tmp_path):
    path = write(tmp_path, h=np.zeros((1, 8), np.float32), c=np.zeros((1, 8), np.float32),
                 labels=np.zeros(1), aux=np.zeros(1))
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=any_shape)
    err = caught.value
    assert (err.source, err.field, err.found) == (str(path), "aux, labels", "no such state input")
    assert err.expected == "arrays named as the state inputs ['c', 'h']"


def test_a_missing_state_names_its_spec_and_the_arrays_there(tmp_path):
    path = write(tmp_path, h=np.zeros((1, 8), np.float32))
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=any_shape)
    assert str(caught.value) == (f"{path}: c: expected the initial state float32[N, 8], "
                                 "found no such array (arrays: ['h'])")


def test_a_shape_the_caller_refuses_is_its_expectation_against_the_shape_found(tmp_path):
    path = write(tmp_path, h=np.zeros((1, 8), np.float32), c=np.zeros((2, 8), np.float32))
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=batch_of_one)
    assert str(caught.value) == f"{path}: c: expected shape [1, 8], found shape [2, 8]"


@pytest.mark.parametrize("stored", ["float64", "float16", "int32"])
def test_a_state_of_another_dtype_is_refused_not_cast(tmp_path, stored):
    path = write(tmp_path, h=np.zeros((1, 8), stored), c=np.zeros((1, 8), np.float32))
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=batch_of_one)
    assert str(caught.value) == f"{path}: h: expected dtype float32, found dtype {stored}"


def test_the_shape_is_judged_before_the_dtype(tmp_path):
    path = write(tmp_path, h=np.zeros((3,), np.float64), c=np.zeros((1, 8), np.float32))
    with pytest.raises(InputError, match=r": h: expected shape \[1, 8\], found shape \[3\]"):
        read_initial_state(path, SPECS, shape=batch_of_one)


def test_a_missing_file_is_an_input_error_naming_it(tmp_path):
    path = tmp_path / "absent.npz"
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=any_shape)
    assert caught.value.source == str(path) and caught.value.found == "no such file"


def test_a_file_that_is_not_an_archive_is_an_input_error_naming_it(tmp_path):
    path = tmp_path / "state0.npz"
    path.write_text("h=0\n")
    with pytest.raises(InputError) as caught:
        read_initial_state(path, SPECS, shape=any_shape)
    assert caught.value.source == str(path) and caught.value.found.startswith("unreadable")
