"""Train the demo CNN on scikit-learn's bundled 8×8 digits (no download) and save three candidates.

- `good.pt2`: exported in eval mode — the promotable candidate.
- `defective.pt2`: the same weights exported while the model was still in training mode, so BatchNorm uses
  batch statistics and Dropout is active: the classic "96% in training, wrong in serving" defect.
- `weak.pt2`: the same network trained on labels from a buggy label mapping (every 9 labelled 4), exported in
  eval mode: a faithful export of a worse model (it never answers 9), which only a comparison with the champion
  can block. (Training on fewer rows or for fewer epochs also makes it worse, but its logits then sit so close
  together that INT8 flips more than 1% of the top-1 answers and parity-diff blocks it first.)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
INPUT_NAME = "pixels"


@dataclass(frozen=True)
class DemoArtifacts:
    good: Path
    defective: Path
    weak: Path
    examples: Path  # example inputs (named as the model's input) with their labels: export, parity, probe, eval
    calibration: Path  # INT8 calibration inputs, drawn from the training set
    reference: Path  # training features, the drift reference
    current: Path  # held-out features, the drift "current" in the release gate
    serving_bug: Path  # held-out features as a buggy serving path sends them: unscaled pixels (0..16)
    accuracy: float
    weak_accuracy: float


def _build_model():  # -> torch.nn.Module (torch is imported lazily)
    import torch
    from torch import nn

    class DigitsCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.GELU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.GELU(), nn.MaxPool2d(2),
            )
            self.head = nn.Sequential(nn.Flatten(), nn.Dropout(0.3), nn.Linear(32 * 2 * 2, 10))

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return self.head(self.features(pixels))

    return DigitsCNN()


def _train(x: np.ndarray, y: np.ndarray, *, epochs: int):  # -> torch.nn.Module in eval mode
    import torch

    model = _build_model()
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for epoch in range(epochs):
        model.train()
        for batch in torch.randperm(len(xt)).split(64):
            optimiser.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[batch]), yt[batch])
            loss.backward()
            optimiser.step()
        log.debug("epoch %d/%d loss %.3f", epoch + 1, epochs, loss.item())
    return model.eval()


def _accuracy(model, x: np.ndarray, y: np.ndarray) -> float:  # model: torch.nn.Module
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def train_and_save(workdir: Path, *, seed: int = 0, epochs: int = 15, examples: int = 256,
                   calibration: int = 512, weak_epochs: int = 30,
                   weak_relabel: tuple[int, int] = (9, 4)) -> DemoArtifacts:
    """Train (seeded, a few seconds on 2 cores), then save the three candidates and the example inputs."""
    import torch
    from sklearn.datasets import load_digits

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    order = rng.permutation(len(x))
    train, test = order[:1400], order[1400:]
    model = _train(x[train], y[train], epochs=epochs)
    accuracy = _accuracy(model, x[test], y[test])
    torch.manual_seed(seed + 1)  # the weak candidate does not depend on how long the good one trained
    mislabelled = np.where(y == weak_relabel[0], weak_relabel[1], y)
    weak = _train(x[train], mislabelled[train], epochs=weak_epochs)
    weak_accuracy = _accuracy(weak, x[test], y[test])

    workdir.mkdir(parents=True, exist_ok=True)
    example = torch.from_numpy(x[test[:examples]])
    batch = torch.export.Dim("batch", min=1, max=4096)
    paths = {}
    for name, training in (("good", False), ("defective", True)):
        model.train(training)
        program = torch.export.export(model, (example,), dynamic_shapes={INPUT_NAME: {0: batch}})
        paths[name] = workdir / f"{name}.pt2"
        torch.export.save(program, str(paths[name]))
    model.eval()
    paths["weak"] = workdir / "weak.pt2"
    torch.export.save(torch.export.export(weak, (example,), dynamic_shapes={INPUT_NAME: {0: batch}}),
                      str(paths["weak"]))
    files = {name: workdir / f"{name}.npz"
             for name in ("examples", "calibration", "reference", "current", "serving_bug")}
    np.savez(files["examples"], **{INPUT_NAME: x[test[:examples]], "labels": y[test[:examples]]})
    np.savez(files["calibration"], **{INPUT_NAME: x[train[:calibration]]})
    np.savez(files["reference"], **{INPUT_NAME: x[train]})
    np.savez(files["current"], **{INPUT_NAME: x[test]})
    np.savez(files["serving_bug"], **{INPUT_NAME: x[test] * 16.0})  # the serving path forgot to divide by 16
    return DemoArtifacts(good=paths["good"], defective=paths["defective"], weak=paths["weak"],
                         examples=files["examples"],
                         calibration=files["calibration"],
                         reference=files["reference"], current=files["current"], serving_bug=files["serving_bug"],
                         accuracy=accuracy, weak_accuracy=weak_accuracy)
