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
def trained(steps: int = 150) -> SmallCNN:
    """SmallCNN fitted to a fixed random linear teacher: decisive logits, as a trained classifier has."""
    torch.manual_seed(0)
    model = SmallCNN()
    teacher = torch.randn(int(np.prod(SHAPE)), 10)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.from_numpy(data(100, 2048))
    y = (x.flatten(1) @ teacher).argmax(1)
    for step in range(steps):
        batch = slice((step * 128) % 2048, (step * 128) % 2048 + 128)
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        optimiser.step()
    return model.eval()


def data(seed: int, samples: int) -> np.ndarray:
    """Images with structure (smooth blobs plus noise), so that the classes the model sees are not all ties."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(samples, *SHAPE)).astype(np.float32)
    blur = (base + np.roll(base, 1, -1) + np.roll(base, 1, -2)) / 3
    return (blur + 0.1 * rng.normal(size=blur.shape)).astype(np.float32)


def build(directory: Path, *, hazard: str = "none", name: str = "model") -> Path:
    """An exported ONNX model. `outlier_channels`: channels 0–2 of conv1 carry activations ~300× the rest (the
    FP32 function unchanged: conv2 takes the scale back). `fragile_weights`: conv2 has one huge weight per
    output channel, so per-channel INT8 weights crush the rest of that channel."""
    model = copy.deepcopy(trained())  # the hazards below edit weights in place
    with torch.no_grad():
        if hazard == "outlier_channels":
            model.conv1.weight[:3] *= 300
            model.conv1.bias[:3] *= 300
            model.conv2.weight[:, :3] /= 300
        elif hazard == "fragile_weights":
            model.conv2.weight.view(16, -1)[:, 0] = 40.0  # one weight per output channel
        elif hazard != "none":
            raise ValueError(hazard)
    x = data(0, 8)
    program = torch.export.export(model, (torch.from_numpy(x),),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=4096)}})
    pt2, examples = directory / f"{name}.pt2", directory / f"{name}.examples.npz"
    torch.export.save(program, str(pt2))
    np.savez(examples, x=x)
    out = directory / f"{name}.onnx"
    verdict = export_model(model=pt2, inputs=examples, out=out)
    assert verdict.status == "pass", verdict.message
    return out


def labelled_eval(model: Path, path: Path, *, seed: int = 1, samples: int = 200) -> Path:
    """Eval inputs with the FP32 model's own argmax as labels (so FP32 accuracy is 100%)."""
    import onnxruntime as ort

    x = data(seed, samples)
    logits = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.savez(path, x=x, labels=logits.argmax(1).astype(np.int64))
    return path


def calibration_set(path: Path, *, samples: int = 256, corrupted: int = 0, seed: int = 2) -> Path:
    x = data(seed, samples)
    for i in range(corrupted):  # a few pixels at ±1000 in `corrupted` samples
        x[10 + 50 * i, 0, 2:4, 2:4] = 1000.0 * (-1) ** i
    np.savez(path, x=x)
    return path
