"""Cross-layer equalisation: move systematic outlier channels' scale into the next layer's weights.

Clipping cannot fix a few channels that are always far larger than the rest: any per-tensor range either
clips them or leaves the other channels a handful of INT8 levels. For `Conv → (Relu | MaxPool)* → Conv`, scaling
channel c of the first Conv's output by 1/s_c and the second Conv's input channel c by s_c leaves the FP32
function unchanged (those ops commute with a positive per-channel scale). With a_c the channel's activation
|max| and w_c the second Conv's weight |max| on that input channel, s_c = sqrt((a_c/ã) / (w_c/w̃)) (medians ã,
w̃): SmoothQuant's α = ½ balance, which undoes an outlier channel exactly when its scale came from the weights.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

CHANNEL_OUTLIER_RATIO = 10.0  # max / median channel |max| from which a tensor is equalised
PASS_THROUGH = {"Relu", "MaxPool"}  # positively homogeneous per channel


@dataclass(frozen=True)
class Pair:
    producer: str  # Conv node whose output channels are divided by s
    consumer: str  # Conv node whose input channels are multiplied by s
    tensor: str  # the activation entering the consumer


def equalizable_pairs(model: onnx.ModelProto) -> list[Pair]:
    """Conv → pass-through ops → Conv chains where every tensor on the way has one consumer and the weights
    (and bias) belong to their node alone."""
    producers = {o: n for n in model.graph.node for o in n.output}
    consumers = Counter(i for n in model.graph.node for i in n.input)
    initializers = {i.name for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}

    def owned(node: onnx.NodeProto) -> bool:
        params = node.input[1:]
        return (node.op_type == "Conv" and _group(node) == 1 and len(params) >= 1
                and all(p in initializers and consumers[p] == 1 for p in params if p))

    pairs = []
    for consumer in model.graph.node:
        if not owned(consumer):
            continue
        tensor = consumer.input[0]
        current = tensor
        node = producers.get(current)
        while node is not None and node.op_type in PASS_THROUGH:
            if consumers[current] != 1 or current in outputs:
                node = None
                break
            current = node.input[0]
            node = producers.get(current)
        if node is not None and owned(node) and consumers[current] == 1 and current not in outputs:
            pairs.append(Pair(node.name, consumer.name, tensor))
    return pairs


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def equalize(model: onnx.ModelProto, pairs: list[Pair], channel_absmax: Mapping[str, np.ndarray | None],
             *, ratio: float = CHANNEL_OUTLIER_RATIO) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """A rescaled copy of `model` and one record per rescaled pair (tensors below `ratio` are left alone)."""
    import onnx
    from onnx import numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    nodes = {n.name: n for n in copy.graph.node}
    tensors = {i.name: i for i in copy.graph.initializer}
    records = []
    for pair in pairs:
        activation = channel_absmax.get(pair.tensor)
        if activation is None or not activation.size:
            continue
        spread = float(activation.max() / max(np.median(activation), 1e-12))
        if spread < ratio:
            continue
        producer, consumer = nodes[pair.producer], nodes[pair.consumer]
        w_next = numpy_helper.to_array(tensors[consumer.input[1]]).astype(np.float64)
        weight = np.abs(np.moveaxis(w_next, 1, 0).reshape(w_next.shape[1], -1)).max(axis=1)
        a = activation / max(np.median(activation), 1e-12)
        w = weight / max(np.median(weight), 1e-12)
        scale = np.where((a > 0) & (w > 0), np.sqrt(a / np.maximum(w, 1e-12)), 1.0)
        _scale(tensors[producer.input[1]], 1 / scale, axis=0)
        if len(producer.input) > 2 and producer.input[2]:
            _scale(tensors[producer.input[2]], 1 / scale, axis=0)
        _scale(tensors[consumer.input[1]], scale, axis=1)
        after = activation / scale
        records.append({"tensor": pair.tensor, "producer": pair.producer, "consumer": pair.consumer,
                        "channels_rescaled": int((np.abs(np.log(scale)) > np.log(2)).sum()),
                        "max_scale": float(scale.max()), "channel_spread_before": spread,
                        "channel_spread_after": float(after.max() / max(np.median(after), 1e-12))})
    return copy, records


def _scale(tensor: onnx.TensorProto, factor: np.ndarray, *, axis: int) -> None:
    from onnx import numpy_helper

    array = numpy_helper.to_array(tensor)
    shape = [1] * array.ndim
    shape[axis] = -1
    scaled = (array.astype(np.float64) * factor.reshape(shape)).astype(array.dtype)
    tensor.CopyFrom(numpy_helper.from_array(scaled, tensor.name))
