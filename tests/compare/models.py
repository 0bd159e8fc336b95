"""Real, small models for the compare tests: scikit-learn fits on its bundled data sets, written as ONNX
(MatMul + Add) so that ONNX Runtime runs them exactly as it runs an exported network."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


def linear_onnx(path: Path, weight: np.ndarray, bias: np.ndarray, *, input_name: str = "x",
                output_name: str = "scores") -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = weight.astype(np.float32).reshape(weight.shape[0], -1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", [input_name, "W"], ["product"]),
         helper.make_node("Add", ["product", "b"], [output_name])], "linear",
        [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", weight.shape[0]])],
        [helper.make_tensor_value_info(output_name, TensorProto.FLOAT, ["batch", weight.shape[1]])],
        initializer=[numpy_helper.from_array(weight, "W"),
                     numpy_helper.from_array(bias.astype(np.float32).reshape(-1), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@dataclass(frozen=True)
class Split:
    train_x: np.ndarray
    train_y: np.ndarray
    eval_x: np.ndarray
    eval_y: np.ndarray


def digits(seed: int = 0) -> Split:
    """8×8 digits, flattened and scaled to [0, 1]; 1297 training and 500 eval samples."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.data / 16.0).astype(np.float32)
    order = np.random.default_rng(seed).permutation(len(x))
    return Split(x[order[:1297]], data.target[order[:1297]], x[order[1297:]], data.target[order[1297:]])


def diabetes(seed: int = 0) -> Split:
    """scikit-learn's diabetes regression set: 10 standardised features, 292 training and 150 eval samples."""
    from sklearn.datasets import load_diabetes

    data = load_diabetes()
    order = np.random.default_rng(seed).permutation(len(data.target))
    x, y = data.data.astype(np.float32), data.target.astype(np.float32)
    return Split(x[order[:292]], y[order[:292]], x[order[292:]], y[order[292:]])


def classifier(path: Path, split: Split, *, samples: int, seed: int = 0) -> Path:
    """Logistic regression on `samples` training rows (fewer rows: a worse model, same architecture)."""
    from sklearn.linear_model import LogisticRegression

    rows = np.random.default_rng(seed).permutation(len(split.train_x))[:samples]
    fit = LogisticRegression(max_iter=2000).fit(split.train_x[rows], split.train_y[rows])
    return linear_onnx(path, fit.coef_.T, fit.intercept_)


def regressor(path: Path, split: Split, *, alpha: float) -> Path:
    """Ridge regression; a large `alpha` shrinks it towards the mean (a worse model)."""
    from sklearn.linear_model import Ridge

    fit = Ridge(alpha=alpha).fit(split.train_x, split.train_y)
    return linear_onnx(path, fit.coef_.reshape(-1, 1), np.atleast_1d(fit.intercept_))
