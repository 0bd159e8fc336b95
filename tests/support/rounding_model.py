"""A model whose float32 rounding differs by sample: one sample far from the others (a large common offset,
cancelled by the first layer) rounds ~1000× as much as the rest. Grounding on the first few samples alone
judged that sample with their tolerance and failed a faithful export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

OFFSET_SAMPLE = 6  # beyond the first four (`rounding.REFERENCE_SAMPLES`)


def save_offset_model(directory: Path, *, offset: float = 1000.0, first: int = OFFSET_SAMPLE) -> dict[str, Path]:
    """`offset.pt2` and `offset.npz` (input `input`, 12 samples, sample `first` shifted by `offset`)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 64), nn.Tanh(), nn.Linear(64, 4)).eval()
    with torch.no_grad():  # each row sums to ~0: a common offset cancels, its rounding stays
        model[0].weight -= model[0].weight.mean(dim=1, keepdim=True)
    x = np.random.default_rng(0).normal(size=(12, 512)).astype(np.float32)
    x[first] += offset
    program = torch.export.export(model, (torch.from_numpy(x[:4]),),
                                  dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(directory / "offset.pt2"))
    np.savez(directory / "offset.npz", input=x)
    return {"pt2": directory / "offset.pt2", "inputs": directory / "offset.npz"}


def shift_first_row(source: Path, target: Path, shift: float) -> Path:
    """A planted defect that shows on the offset sample only: row 0 of the first Linear's weight moved by
    `shift` everywhere, so that output moves by `shift` × the sum of the input (large only on that sample)."""
    model = onnx.load(str(source))
    gemm = next(n for n in model.graph.node if n.op_type in ("Gemm", "MatMul"))
    tensor = next(i for i in model.graph.initializer if i.name == gemm.input[1])
    weight = numpy_helper.to_array(tensor).copy()
    transposed = next((a.i for a in gemm.attribute if a.name == "transB"), 0) == 1
    if transposed:
        weight[0, :] += shift
    else:
        weight[:, 0] += shift
    tensor.CopyFrom(numpy_helper.from_array(weight.astype(np.float32), tensor.name))
    onnx.save(model, str(target))
    return target
