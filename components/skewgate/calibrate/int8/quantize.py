"""Hand the chosen ranges to ONNX Runtime's QDQ quantiser: its quantisation, our calibration."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.errors import InputError

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

WEIGHTED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")  # an INT8 model without one of these gains nothing


def op_types_to_quantize() -> list[str]:
    """What `quantize_static` quantises by default: every op of ORT's QLinear and QDQ registries."""
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return sorted(set(QLinearOpsRegistry) | set(QDQRegistry))


def relu_inputs(model: onnx.ModelProto) -> dict[str, str]:
    """Tensors whose only consumer is a Relu → that Relu's output. Their range is the Relu output's: ORT's QDQ
    quantiser folds the Relu into that range, and clipping at 0 is what the Relu does anyway — so they need no
    calibration of their own (a third of a ResNet's tensors)."""
    consumers = Counter(i for n in model.graph.node for i in n.input)
    outputs = {o.name for o in model.graph.output}
    return {n.input[0]: n.output[0] for n in model.graph.node
            if n.op_type == "Relu" and consumers[n.input[0]] == 1 and n.input[0] not in outputs}


def tensors_to_calibrate(model: onnx.ModelProto) -> list[str]:
    """Float inputs and outputs of the ops ORT will quantise, as its own calibrators select them, less the
    tensors that take a Relu output's range."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)}
    initializers = {i.name for i in model.graph.initializer}
    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
    ops = set(op_types_to_quantize())
    names: dict[str, None] = {}
    for node in model.graph.node:
        if node.op_type in ops:
            for name in (*node.input, *node.output):
                if name and name not in initializers and name in typed \
                        and typed[name].type.tensor_type.elem_type in floats:
                    names[name] = None
    shared = relu_inputs(model)
    return [n for n in names if n not in shared]


def nodes_touching(model: onnx.ModelProto, tensors: Collection[str]) -> dict[str, str]:
    """Node → the first of `tensors` it reads or writes, for the nodes the quantiser would quantise."""
    ops, wanted = set(op_types_to_quantize()), set(tensors)
    touching = {}
    for node in model.graph.node:
        hit = next((t for t in (*node.input, *node.output) if t in wanted), None)
        if hit is not None and node.op_type in ops:
            touching[node.name] = hit
    return touching


def prepare(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as ORT's quantiser wants it (shapes inferred, saved and reloaded)."""
    from onnxruntime.quantization.quant_utils import save_and_reload_model_with_shape_infer

    return save_and_reload_model_with_shape_infer(model)


def quantize(model: onnx.ModelProto, ranges: Mapping[str, tuple[float, float]], out: str | Path, *,
             exclude: Collection[str] = (), per_channel: bool = True, reduce_range: bool = False) -> Path:
    """Write the QDQ INT8 model (INT8 activations and weights, per-channel weights by default): one-off; the
    budget loop, which quantises one model many times, keeps a `Quantizer`."""
    return Quantizer(model, ranges, per_channel=per_channel).write(out, exclude=exclude, reduce_range=reduce_range)


class Quantizer:
    """One model and its ranges, prepared once (shapes inferred, the Relu-shared ranges resolved) and written as
    many times as the budget loop tries: only what a trial changes (nodes kept in FP32, 7-bit weights) varies."""

    def __init__(self, model: onnx.ModelProto, ranges: Mapping[str, tuple[float, float]], *,
                 per_channel: bool = True, keep_fp32: Collection[str] = ()) -> None:
        """`keep_fp32`: nodes never quantised, whatever a trial excludes (they touch a tensor INT8 cannot
        hold)."""
        self.prepared = prepare(model)
        shared = {pre: ranges[post] for pre, post in relu_inputs(self.prepared).items() if post in ranges}
        self.ranges = {**ranges, **shared}
        self.per_channel = per_channel
        self.keep_fp32 = list(keep_fp32)
        self.op_types = op_types_to_quantize()
        self.refused: dict[str, list[str]] = {}  # tensor ORT's quantiser refused → nodes kept in FP32 for it

    def write(self, out: str | Path, *, exclude: Collection[str] = (), reduce_range: bool = False) -> Path:
        """Quantise and save to `out`. Where ORT's quantiser refuses a tensor (a weight it would have to share
        parameters for: "shared mode is not supported for weight"), the nodes reading it stay in FP32, for
        this and every later write, and `refused` says so; a refusal it cannot place is "could not evaluate"."""
        while True:
            try:
                written = self._write(out, exclude=exclude, reduce_range=reduce_range)
                if self.refused:
                    _check_valid(written, self.refused)
                return written
            except ValueError as err:
                tensor, touching = _refused(err)
                readers = [name for name in touching if name not in self.keep_fp32]
                if tensor is None or not readers:
                    raise InputError(out, expected="a model ONNX Runtime's quantiser accepts",
                                     found=f"the quantiser refused it: {err}") from err
                log.warning("ONNX Runtime's quantiser refuses %s (%s): keeping %s in FP32", tensor, err, readers)
                self.refused.setdefault(tensor, []).extend(readers)
                self.keep_fp32 += readers

    def _write(self, out: str | Path, *, exclude: Collection[str], reduce_range: bool) -> Path:
        import onnx
        from onnxruntime.quantization import QuantType
        from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData
        from onnxruntime.quantization.qdq_quantizer import QDQQuantizer

        # built afresh each time: the quantiser edits both its model and its ranges in place (Sigmoid, Softmax)
        data = TensorsData(CalibrationMethod.MinMax, {
            name: TensorData(lowest=np.float32(low), highest=np.float32(high))
            for name, (low, high) in self.ranges.items()})
        source = onnx.ModelProto()
        source.CopyFrom(self.prepared)
        excluded = [*self.keep_fp32, *(n for n in exclude if n not in self.keep_fp32)]
        quantizer = QDQQuantizer(source, self.per_channel, reduce_range, QuantType.QInt8,
                                 QuantType.QInt8, data, [], excluded, self.op_types, {})
        previous = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # ORT logs a pre-processing hint on the root logger
        try:
            quantizer.quantize_model()
        finally:
            logging.getLogger().setLevel(previous)
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        quantizer.model.save_model_to_file(str(out), False)
        return out


def _check_valid(path: Path, refused: Mapping[str, list[str]]) -> None:
    """After a refusal, ORT's quantiser may write a graph that defines a tensor twice (it folds a weight's
    Reshape into a weight it then quantises anyway): such a file is "could not evaluate", naming what it refused."""
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as err:
        path.unlink()  # nobody may pick up a file ONNX Runtime refuses to load
        named = "; ".join(f"{tensor} (read by {', '.join(nodes)})" for tensor, nodes in refused.items())
        raise InputError(path, expected="a valid INT8 model with the tensors ONNX Runtime's quantiser refuses "
                                        f"kept in FP32: {named}",
                         found=f"an invalid model ({str(err).splitlines()[0][:200]})") from err


def _refused(err: ValueError) -> tuple[str | None, list[str]]:
    """The tensor ORT's quantiser was placing when it raised `err`, and the nodes that read or write it in the
    quantiser's own graph (it folds and renames: a Reshape of a weight becomes a weight read by several
    nodes). Its message names neither; the frame that raised holds both (`tensor_name`, `self.model`)."""
    traceback = err.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    found = traceback.tb_frame.f_locals if traceback is not None else {}
    tensor, quantizer = found.get("tensor_name"), found.get("self")
    if not isinstance(tensor, str) or quantizer is None or not hasattr(quantizer, "model"):
        return None, []
    return tensor, [n.name for n in quantizer.model.nodes() if tensor in (*n.input, *n.output)]
