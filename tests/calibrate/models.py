"""Small CNNs for calibration tests, exported the way skewgate exports, with planted calibration hazards."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import torch
from torch import nn

from skewgate.export.core import export_model

SHAPE = (1, 8, 8)
MIB = 2**20
TRAIN = 1400
FRAGILE = {"fragile_weights": 8.0, "very_fragile_weights": 12.0}  # conv2's one large weight


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        return self.head(torch.relu(self.conv3(x)).flatten(1))


@functools.cache
def digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's bundled 8×8 digits (no download) in [0, 1], in a fixed shuffled order: the first 1,400
    train the model and calibrate it, the rest (397) evaluate it."""
    from sklearn.datasets import load_digits

    loaded = load_digits()
    order = np.random.default_rng(0).permutation(len(loaded.images))
    return (loaded.images[order] / 16.0).astype(np.float32)[:, None], loaded.target[order].astype(np.int64)


@functools.cache
def trained(epochs: int = 10) -> SmallCNN:
    """SmallCNN trained on the digits: a decisive classifier, as a model headed for INT8 is."""
    torch.manual_seed(0)
    model = SmallCNN()
    images, labels = digits()
    x, y = torch.from_numpy(images[:TRAIN]), torch.from_numpy(labels[:TRAIN])
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        for batch in torch.randperm(TRAIN, generator=torch.Generator().manual_seed(epoch)).split(64):
            optimiser.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            optimiser.step()
    return model.eval()


def build(directory: Path, *, hazard: str = "none", name: str = "model") -> Path:
    """An exported ONNX model. `outlier_channels`: channels 0–2 of conv1 carry activations ~300× the rest (the
    FP32 function unchanged: conv2 takes the scale back). `fragile_weights` (and `very_fragile_weights`): conv2
    has one large weight per output channel, so per-channel INT8 weights crush the rest of that channel."""
    model = copy.deepcopy(trained())  # the hazards below edit weights in place
    with torch.no_grad():
        if hazard == "outlier_channels":
            model.conv1.weight[:3] *= 300
            model.conv1.bias[:3] *= 300
            model.conv2.weight[:, :3] /= 300
        elif hazard in FRAGILE:
            model.conv2.weight.view(16, -1)[:, 0] = FRAGILE[hazard]  # one large weight per output channel
        elif hazard != "none":
            raise ValueError(hazard)
    x = digits()[0][:8]
    program = torch.export.export(model, (torch.from_numpy(x),),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}})
    pt2, examples = directory / f"{name}.pt2", directory / f"{name}.examples.npz"
    torch.export.save(program, str(pt2))
    np.savez(examples, x=x)
    out = directory / f"{name}.onnx"
    verdict = export_model(model=pt2, inputs=examples, out=out)
    assert verdict.status == "pass", verdict.message
    return out


def labelled_eval(model: Path, path: Path) -> Path:
    """The held-out digits with the FP32 model's own argmax as labels (so FP32 accuracy is 100%)."""
    import onnxruntime as ort

    x = digits()[0][TRAIN:]
    logits = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.savez(path, x=x, labels=logits.argmax(1).astype(np.int64))
    return path


def calibration_set(path: Path, *, samples: int = 256, corrupted: int = 0) -> Path:
    """Training digits; `corrupted` of them with a few pixels at ±1000."""
    x = digits()[0][:samples].copy()
    for i in range(corrupted):
        x[10 + 50 * i, 0, 2:4, 2:4] = 1000.0 * (-1) ** i
    np.savez(path, x=x)
    return path


def tiny_mlp(path: Path, *, classes: int = 3, softmax: bool = False, seed: int = 0) -> Path:
    """x[N, 4] → MatMul `mm1` (+ bias) → Relu → MatMul `mm2` → y[N, classes] (→ Softmax → p with `softmax`), built
    with onnx.helper: a model that quantises and runs in milliseconds, with values named for the tests."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = {"w1": rng.normal(size=(4, 8)), "b1": rng.normal(size=8) * 0.1, "w2": rng.normal(size=(8, classes))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["mm1_out"], name="mm1"),
             helper.make_node("Add", ["mm1_out", "b1"], ["a"], name="add1"),
             helper.make_node("Relu", ["a"], ["h"], name="relu"),
             helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2")]
    output = "y"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["y"], ["p"], name="softmax", axis=-1))
        output = "p"
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["N", classes])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path
