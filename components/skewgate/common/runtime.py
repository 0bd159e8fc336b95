"""ONNX Runtime sessions as the layerwise steps (parity, calibrate) use them: CPU, quiet, built from an
in-memory model, outputs handed back by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx


def session(model: onnx.ModelProto, *, arena: bool = True, cuda: bool = False, spinning: bool = False) -> Any:
    """An `onnxruntime.InferenceSession` on the CPU (`cuda`: on the CUDA provider, CPU for what it lacks).
    `arena=False` for a graph that outputs its intermediates: each is a fresh allocation per run, and ORT's arena
    would keep the peak of those for the session's life. `spinning=True` for a session run back to back with
    nothing between the runs (a step model driven over time), where the waiting threads cost nothing."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = arena
    options.log_severity_level = 3  # errors only: exposed intermediates make ORT warn about every one
    # ORT's worker threads spin for a while after each run, waiting for more work. Every caller here runs
    # something else between runs (PyTorch, numpy statistics) on the same cores, which the spinning threads
    # starve: a torch/ORT pair interleaved batch by batch took 0.85 s spinning, 0.50 s not; ORT alone loses
    # ~5% (benchmarks/parity_bench.py).
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
    if cuda and "CUDAExecutionProvider" not in ort.get_available_providers():
        raise RuntimeError("the CUDA execution provider is not available (onnxruntime-gpu and a GPU are needed)")
    return ort.InferenceSession(model.SerializeToString(), options, providers=providers)


def run_by_name(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of one run, keyed by output name."""
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
