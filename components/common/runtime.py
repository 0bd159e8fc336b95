"""ONNX Runtime sessions as the layerwise steps (parity, calibrate) use them: CPU, quiet, built from an
in-memory model, outputs handed back by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx


def session(model: onnx.ModelProto, *, arena: bool = True) -> Any:
    """An `onnxruntime.InferenceSession` on the CPU. `arena=False` for a graph that outputs its intermediates:
    each is a fresh allocation per run, and ORT's arena would keep the peak of those for the session's life."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.log_severity_level = 3  # errors only: exposed intermediates make ORT warn about every one
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_by_name(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of one run, keyed by output name."""
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
