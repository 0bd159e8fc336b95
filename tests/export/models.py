"""Small real models for export tests, each saved as a `.pt2` with a known defect (or none)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

Variant = Literal["good", "train_mode", "untouched_bn", "nan_weight", "static_batch", "tanh_gelu"]
INPUT = "x"


class SmallNet(nn.Module):
    def __init__(self, gelu: str = "none") -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.GELU(approximate=gelu)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.max_pool2d(self.act(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(h.flatten(1)))


def examples(n: int = 12, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 1, 8, 8)).astype(np.float32)


def save_variant(variant: Variant, directory: Path) -> Path:
    torch.manual_seed(0)
    model = SmallNet(gelu="tanh" if variant == "tanh_gelu" else "none")
    if variant != "untouched_bn":
        model.train()
        with torch.no_grad():  # a few batches so BatchNorm's running statistics are real
            for seed in range(3):
                model(torch.from_numpy(examples(32, seed=seed + 10)))
    model.train(variant == "train_mode")
    if variant == "nan_weight":
        with torch.no_grad():
            model.fc.weight[0, 0] = float("nan")
    example = torch.from_numpy(examples(4))
    dynamic = None if variant == "static_batch" else {INPUT: {0: torch.export.Dim("batch", min=1, max=1024)}}
    program = torch.export.export(model, (example,), dynamic_shapes=dynamic)
    path = directory / f"{variant}.pt2"
    torch.export.save(program, str(path))
    return path
