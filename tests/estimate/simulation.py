"""Data with a known truth for the estimate's tests: two features, the label's chance set by the first alone.

P(label = 1 | x) = sigmoid(3·x₀); the model scores 1.5·x₀ + 0.3 (the right ranking, miscalibrated: what the
calibration must repair). Moving x₀ towards the decision boundary lowers the accuracy the labels realise; moving
x₁, which neither the truth nor the model reads, leaves it where it was. Three classes: the same idea with the
class's chance a softmax of 2·(W x), the model's scores W x.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TRUE_SLOPE, MODEL_SLOPE, MODEL_BIAS = 3.0, 1.5, 0.3
# three classes: class k's logit is W[k] · x (the model), twice it (the truth)
W3 = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])


@dataclass(frozen=True)
class Shift:
    """Where the features are drawn: x₀ ~ N(0, spread), x₁ ~ N(offset, 1)."""

    spread: float = 1.5
    offset: float = 0.0


REFERENCE = Shift()
INTO_THE_BOUNDARY = Shift(spread=0.4)  # accuracy falls from ~0.87 to ~0.67
IGNORED_FEATURE = Shift(offset=3.0)  # accuracy holds


def features(rng: np.random.Generator, n: int, shift: Shift) -> np.ndarray:
    return np.stack([rng.normal(0, shift.spread, n), rng.normal(shift.offset, 1, n)], axis=1).astype(np.float32)


def binary(rng: np.random.Generator, n: int, shift: Shift) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, the model's logits as two columns, labels drawn from the truth)."""
    x = features(rng, n, shift)
    truth = 1 / (1 + np.exp(-TRUE_SLOPE * x[:, 0].astype(np.float64)))
    labels = (rng.random(n) < truth).astype(np.int64)
    logits = np.stack([np.zeros(n), MODEL_SLOPE * x[:, 0] + MODEL_BIAS], axis=1)
    return x, logits, labels


def three_class(rng: np.random.Generator, n: int, shift: Shift) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels drawn from the truth) for the three-class model `save_model(..., W3)`."""
    x = features(rng, n, shift)
    logits = 2 * x.astype(np.float64) @ W3.T
    chance = np.exp(logits - logits.max(axis=1, keepdims=True))
    chance /= chance.sum(axis=1, keepdims=True)
    labels = (chance.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1).clip(max=2)
    return x, labels.astype(np.int64)


def save_model(path: Path, weights: np.ndarray, bias: np.ndarray | None = None, *, softmax: bool = False) -> Path:
    """An ONNX classifier x → x Wᵀ + b (logits, or a Softmax's probabilities), input `x` float32[N, features]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    classes, width = weights.shape
    b = np.zeros(classes) if bias is None else bias
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["logits"], transB=1)]
    out = "logits"
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1))
        out = "probabilities"
    graph = helper.make_graph(
        nodes, "classifier", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", classes])],
        initializer=[numpy_helper.from_array(weights.astype(np.float32), "W"),
                     numpy_helper.from_array(b.astype(np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def binary_model(path: Path) -> Path:
    """The binary model of `binary` as ONNX (two logit columns, class 0's fixed at 0)."""
    return save_model(path, np.array([[0.0, 0.0], [MODEL_SLOPE, 0.0]]), np.array([0.0, MODEL_BIAS]))


def known_truth_files(d: Path) -> dict[str, Any]:
    """In `d`: the binary model, a labelled reference of 4000 samples, and current data sets (boundary, ignored,
    mild, wide, and scaled: reference-like data a serving bug multiplied by 16) with the accuracy their true labels
    realise (`<name>_realised`)."""
    rng = np.random.default_rng(0)
    found: dict[str, Any] = {"model": binary_model(d / "binary.onnx"), "dir": d}
    x, _, labels = binary(rng, 4000, REFERENCE)
    np.savez(d / "reference.npz", x=x, labels=labels)
    found["reference"] = d / "reference.npz"
    for name, shift, n, scale in [("boundary", INTO_THE_BOUNDARY, 4000, 1), ("ignored", IGNORED_FEATURE, 4000, 1),
                                  ("mild", Shift(spread=1.0), 1000, 1), ("wide", Shift(spread=3.0), 4000, 1),
                                  ("scaled", REFERENCE, 4000, 16)]:
        x, _, labels = binary(rng, n, shift)
        x = x * np.float32(scale)
        np.savez(d / f"{name}.npz", x=x)
        found[name] = d / f"{name}.npz"
        predicted = (MODEL_SLOPE * x[:, 0] + MODEL_BIAS > 0).astype(np.int64)  # what the model sees
        found[f"{name}_realised"] = float(np.mean(predicted == labels))
    return found
