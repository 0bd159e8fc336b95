"""The QDQ quantiser fed our ranges: the scales come from them, exclusions and 7-bit weights do what the budget
loop relies on, and a `Quantizer` prepared once writes the same file however often it is used."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from skewgate.calibrate.int8.quantize import Quantizer, quantize, tensors_to_calibrate
from tests.calibrate.models import tiny_mlp

RANGES = {"x": (-1.0, 1.0), "mm1_out": (-2.0, 2.0), "h": (0.0, 2.0), "y": (-3.0, 3.0), "p": (0.0, 1.0)}


@pytest.fixture
def tiny(tmp_path):
    return onnx.load(tiny_mlp(tmp_path / "tiny.onnx", softmax=True))


def initializer(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == name))


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def test_relu_inputs_take_the_relu_outputs_range_and_are_not_calibrated(tiny, tmp_path):
    names = tensors_to_calibrate(tiny)
    assert "a" not in names and {"x", "h", "y"} <= set(names)
    written = onnx.load(quantize(tiny, RANGES, tmp_path / "q.onnx"))
    # the Relu is folded into h's range (clipping at 0 is what it did); every MatMul reads dequantised values
    assert "Relu" not in {n.op_type for n in written.graph.node}
    for name in ("mm1", "mm2"):
        assert all(i.endswith("_DequantizeLinear_Output") for i in node(written, name).input), name


def test_activation_scales_follow_the_given_ranges(tiny, tmp_path):
    narrow = onnx.load(quantize(tiny, RANGES, tmp_path / "narrow.onnx"))
    wide = onnx.load(quantize(tiny, {**RANGES, "x": (-2.0, 2.0)}, tmp_path / "wide.onnx"))
    assert float(initializer(narrow, "x_scale")) == pytest.approx(2.0 / 255, rel=1e-6)
    assert float(initializer(wide, "x_scale")) == pytest.approx(2 * float(initializer(narrow, "x_scale")), rel=1e-6)
    assert float(initializer(wide, "h_scale")) == float(initializer(narrow, "h_scale"))  # the others unchanged


def test_an_excluded_node_keeps_its_fp32_weights(tiny, tmp_path):
    written = onnx.load(quantize(tiny, RANGES, tmp_path / "q.onnx", exclude=["mm2"]))
    assert node(written, "mm2").input[1] == "w2"  # the float initializer itself
    assert node(written, "mm1").input[1] == "w1_DequantizeLinear_Output"


@pytest.mark.parametrize("reduce_range, widest", [(False, 127), (True, 64)], ids=["8-bit", "7-bit"])
def test_reduce_range_gives_7_bit_weights(tiny, tmp_path, reduce_range, widest):
    """7-bit weights (ORT's symmetric reduced range is [-64, 64]) keep u8×s8 pairs from saturating int16."""
    written = onnx.load(quantize(tiny, RANGES, tmp_path / "q.onnx", reduce_range=reduce_range))
    weights = np.concatenate([initializer(written, f"{w}_quantized").ravel() for w in ("w1", "w2")])
    assert int(np.abs(weights.astype(np.int32)).max()) == widest


def test_a_prepared_quantizer_writes_the_same_file_every_time(tiny, tmp_path):
    """The budget loop reuses one `Quantizer`; ORT's quantiser edits its model and ranges in place, so a trial
    must not leak into the next (here: a trial with an exclusion and 7-bit weights in between)."""
    quantizer = Quantizer(tiny, RANGES)
    first = quantizer.write(tmp_path / "first.onnx").read_bytes()
    between = quantizer.write(tmp_path / "between.onnx", exclude=["mm2"], reduce_range=True).read_bytes()
    again = quantizer.write(tmp_path / "again.onnx").read_bytes()
    one_off = quantize(tiny, RANGES, tmp_path / "one_off.onnx").read_bytes()
    assert first == again == one_off != between
    assert RANGES["p"] == (0.0, 1.0) and "a" not in RANGES  # the caller's ranges are not edited either
