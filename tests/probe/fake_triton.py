"""A fake Triton behind the `Triton` seam: serves y = x @ W (batch dimension first), configurable one defect at a
time, so that every probe check can be judged without a server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import Unreachable
from skewgate.common.io import TensorSpec
from skewgate.common.triton.client import ServerRefused
from skewgate.common.triton.repository import Signature, TensorSignature
from skewgate.probe.core import GatedModel

WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
SIGNATURE = Signature(inputs=(TensorSignature("x", "TYPE_FP32", (-1, 4)),),
                      outputs=(TensorSignature("y", "TYPE_FP32", (-1, 3)),))


def gated(sha256: str = "a" * 64) -> GatedModel:
    """The gated model the fake serves: ONNX Runtime's answer is x @ W."""
    return GatedModel(path=Path("model.onnx"), sha256=sha256, signature=SIGNATURE,
                      input_specs=(TensorSpec("x", "float32", (None, 4)),),
                      reference=lambda feeds: {"y": np.asarray(feeds["x"]) @ WEIGHTS})


def metadata(*, datatype: str = "FP32", shape: tuple[int, ...] = (-1, 4), versions: tuple[str, ...] = ("1",),
             extra_output: str | None = None) -> dict[str, Any]:
    outputs = [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    if extra_output:
        outputs.append({"name": extra_output, "datatype": "FP32", "shape": [-1, 1]})
    return {"name": "m", "versions": list(versions), "inputs": [{"name": "x", "datatype": datatype,
                                                                 "shape": list(shape)}], "outputs": outputs}


def config(*, max_batch_size: int = 8, input_dims: tuple[int, ...] = (4,)) -> dict[str, Any]:
    return {"name": "m", "max_batch_size": max_batch_size, "input": [{"name": "x", "dims": list(input_dims)}],
            "output": [{"name": "y", "dims": [3] if max_batch_size else [-1, 3]}]}


@dataclass
class FakeTriton:
    live: bool = True
    ready: bool = True
    model_ready: bool = True
    load_error: str | None = None  # what the server answers to a load; None: the load succeeds
    metadata: dict[str, Any] = field(default_factory=metadata)
    config: dict[str, Any] = field(default_factory=config)
    # the served model: feeds → outputs; default the gated one, exactly
    serve: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]] = \
        field(default=lambda feeds: {"y": np.asarray(feeds["x"]) @ WEIGHTS})
    infer_error: str | None = None
    unreachable: bool = False
    requests: int = 0
    connections: int = 0
    closed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _reach(self) -> None:
        if self.unreachable:
            raise Unreachable("Triton at fake (http): live failed for 1s: ConnectionRefusedError")

    def is_server_live(self) -> bool:
        self._reach()
        return self.live

    def is_server_ready(self) -> bool:
        self._reach()
        return self.ready

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return self.model_ready

    def load_model(self, model: str) -> None:
        if self.load_error is not None:
            raise ServerRefused(f"Triton at fake (http): load failed: {self.load_error}", answer=self.load_error)
        self.model_ready = True

    def model_metadata(self, model: str) -> dict[str, Any]:
        return self.metadata

    def model_config(self, model: str) -> dict[str, Any]:
        return self.config

    def inference_statistics(self, model: str) -> dict[str, Any]:
        return {"model_stats": [{"name": model, "version": "1", "execution_count": self.requests,
                                 "inference_stats": {"success": {"count": self.requests, "ns": 0},
                                                     "queue": {"count": self.requests, "ns": 2000 * self.requests},
                                                     "compute_infer": {"ns": 5000 * self.requests}}}]}

    def infer(self, model: str, feeds: Mapping[str, np.ndarray], outputs: list[str], *,
              datatypes: Mapping[str, str], version: str = "", sequence: object = None) -> dict[str, np.ndarray]:
        if self.infer_error is not None:
            raise ServerRefused(f"Triton at fake (http): infer {model} failed: {self.infer_error}",
                                answer=self.infer_error)
        with self._lock:
            self.requests += 1
        served = self.serve(feeds)
        return {name: served[name] for name in outputs}

    def connect_again(self) -> FakeTriton:
        with self._lock:
            self.connections += 1
        return self  # one fake, several "connections": the counts stay in one place

    def close(self) -> None:
        with self._lock:
            self.closed += 1
