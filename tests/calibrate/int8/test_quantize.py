"""The QDQ quantiser fed our ranges: the scales come from them, exclusions and 7-bit weights do what the budget
loop relies on, and a `Quantizer` prepared once writes the same file however often it is used."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from skewgate.calibrate.int8.quantize import Quantizer, quantize, tensors_to_calibrate
from skewgate.common.errors import InputError
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


class _Graph:
    def __init__(self, model: onnx.ModelProto) -> None:
        self._model = model

    def nodes(self) -> list[onnx.NodeProto]:
        return list(self._model.graph.node)


class RefusingOrtQuantiser:
    """Stands in for ORT's QDQQuantizer where it refuses a tensor ("shared mode is not supported for weight"):
    the frame that raises holds `tensor_name` and the quantiser's own graph, as ORT's does."""

    def __init__(self, model: onnx.ModelProto, tensor: object) -> None:
        self.model = _Graph(model)
        self.tensor = tensor

    def quantize_model(self) -> None:
        tensor_name = self.tensor  # noqa: F841 (read from this frame by the code under test)
        raise ValueError("Quantization parameter shared mode is not supported for weight yet")


class RefusingOnce(Quantizer):
    """A `Quantizer` whose first write meets the refusal; `then` writes what the later ones write."""

    def __init__(self, *args, tensor: object = "h", then=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tensor, self.then, self.calls = tensor, then, []

    def _write(self, out, *, exclude, reduce_range):
        self.calls.append(list(self.keep_fp32))
        if len(self.calls) == 1:
            RefusingOrtQuantiser(self.prepared, self.tensor).quantize_model()
        return (self.then or super()._write)(out, exclude=exclude, reduce_range=reduce_range)


def test_a_tensor_the_quantiser_refuses_is_kept_in_fp32_with_every_node_touching_it(tiny, tmp_path):
    quantizer = RefusingOnce(tiny, RANGES)
    written = onnx.load(quantizer.write(tmp_path / "q.onnx"))
    touching = [n.name for n in tiny.graph.node if "h" in (*n.input, *n.output)]
    assert quantizer.refused == {"h": touching}
    assert quantizer.calls == [[], touching]  # tried once as asked, then once with them kept in FP32
    assert node(written, "mm2").input[1] == "w2"  # the reader of the refused tensor: FP32 weights
    assert node(written, "mm1").input[1] == "w1_DequantizeLinear_Output"  # the rest still INT8
    onnx.checker.check_model(written)
    quantizer.write(tmp_path / "again.onnx")
    assert len(quantizer.calls) == 3  # later writes keep them in FP32 from the start


def test_a_refusal_that_names_no_tensor_is_could_not_evaluate_not_a_bug(tiny, tmp_path):
    with pytest.raises(InputError, match="the quantiser refused it: Quantization parameter shared mode"):
        RefusingOnce(tiny, RANGES, tensor=None).write(tmp_path / "q.onnx")


def test_an_invalid_model_written_after_a_refusal_is_removed_and_names_the_tensor(tiny, tmp_path):
    def twice_defined(out, *, exclude, reduce_range):  # what ORT wrote for poolformer: a value defined twice
        model = onnx.ModelProto()
        model.CopyFrom(tiny)
        model.graph.node.append(onnx.helper.make_node("Identity", ["x"], ["h"], name="again"))
        onnx.save(model, str(out))
        return out

    out = tmp_path / "q.onnx"
    with pytest.raises(InputError, match=r"kept in FP32: h \(read by .*mm2\).*single static assignment"):
        RefusingOnce(tiny, RANGES, then=twice_defined).write(out)
    assert not out.exists()
