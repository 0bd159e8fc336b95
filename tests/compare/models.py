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


def _save(path: Path, nodes: list, inputs: list, outputs: list, initializers: dict[str, np.ndarray]) -> Path:
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, path.stem, inputs, outputs,
                              initializer=[numpy_helper.from_array(v.astype(np.float32), k)
                                           for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def ink_segmenter(path: Path, low: float, high: float) -> Path:
    """Per pixel of a 1×8×8 digit: background below `low`, faint ink up to `high`, strong ink above — three class
    scores (−x + low, 0, x − high) from one 1×1 Conv, N×3×8×8. Thresholds away from the truth's: a worse model."""
    from onnx import TensorProto, helper

    weight = np.array([-1.0, 0.0, 1.0]).reshape(3, 1, 1, 1)
    return _save(path, [helper.make_node("Conv", ["x", "W", "b"], ["classes"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 8, 8])],
                 [helper.make_tensor_value_info("classes", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                 {"W": weight, "b": np.array([low, 0.0, -high])})


def ink_labels(images: np.ndarray, low: float = 0.27, high: float = 0.61) -> np.ndarray:
    """The truth `ink_segmenter` learns: N×8×8 class per pixel."""
    return np.digitize(images[:, 0], [low, high]).astype(np.int64)


def embedder(path: Path, projection: np.ndarray) -> Path:
    """x @ projection, L2-normalised: an embedding model, retrieval by cosine."""
    from onnx import TensorProto, helper

    return _save(path, [helper.make_node("MatMul", ["x", "P"], ["projected"]),
                        helper.make_node("LpNormalization", ["projected"], ["embedding"], axis=-1, p=2)],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", projection.shape[0]])],
                 [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", projection.shape[1]])],
                 {"P": projection})


def discriminant(split: Split, dims: int) -> np.ndarray:
    """The digits' linear discriminant directions (the first `dims`): what a trained embedding separates by."""
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    fit = LinearDiscriminantAnalysis(n_components=dims).fit(split.train_x, split.train_y)
    return fit.scalings_[:, :dims]
