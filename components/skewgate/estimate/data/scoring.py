"""The classifier's scores per class on a data set, batch by batch: one ONNX Runtime session for every side."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.runtime import run_by_name, session
from skewgate.estimate.data.batches import Inputs
from skewgate.estimate.method.calibration import probabilities

NORMALISING_OPS = ("Softmax", "Sigmoid")  # an output one of these produces holds probabilities, not logits


@dataclass(frozen=True)
class Scorer:
    """`path`'s graph output `output` as scores per class; `normalised`: a Softmax or Sigmoid produces it."""

    path: Path
    sha256: str
    output: str
    normalised: bool
    specs: Sequence[TensorSpec]
    runner: Any

    @classmethod
    def load(cls, onnx: str | Path, output: str | None) -> Scorer:
        """The model at `onnx`, scoring `output` (default: its first output, which must exist)."""
        path = Path(onnx)
        model = load_onnx(path)
        outputs = [o.name for o in model.graph.output]
        chosen = output or outputs[0]
        if chosen not in outputs:
            raise InputError(path, field="output", expected=f"one of the outputs {outputs}", found=repr(chosen))
        normalised = any(chosen in n.output for n in model.graph.node if n.op_type in NORMALISING_OPS)
        return cls(path, sha256_file(path), chosen, normalised, onnx_input_specs(model), session(model))

    def inputs(self, data: str | Path, *, features: Sequence[str], batch_rows: int,
               files: Sequence[str] = ()) -> Inputs:
        """`data` as this model's inputs; `files`: only these of a snapshot's files (a shard)."""
        location = str(data) if "://" in str(data) else Path(data)  # Path would fold a URI's `//`
        return Inputs(location, self.specs, features, batch_rows, files)

    def scores(self, inputs: Inputs) -> Iterator[tuple[str, np.ndarray]]:
        """(the file the batch comes from, as `Inputs.batches` names it; its scores per class)."""
        for origin, feeds in inputs.batches():
            yield origin, probabilities(run_by_name(self.runner, feeds)[self.output], normalised=self.normalised,
                                        source=f"{self.path} output `{self.output}`")
