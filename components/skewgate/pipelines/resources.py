"""CPU/memory requests and limits per step, and the accelerator of the GPU variant: what a cluster schedules.

The defaults are sized from the peak memory measured on the demo's inputs (`benchmarks/step_memory.py`, docs/design.md:
resources table) with headroom; a bigger model or data set needs more. Override them at compile time with a JSON
file (`skewgate pipeline compile --resources FILE`, or `$SKEWGATE_RESOURCES` for every compile, the chart's
upload Job included): `{"parity": {"memory_limit": "8Gi"}, "probe": {"cpu_request": "2"}}`. Unnamed fields
keep their defaults.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skewgate.common.errors import InputError

Variant = Literal["cpu", "gpu"]
GPU = "nvidia.com/gpu"
# The steps that run ONNX Runtime or Triton on the model; in the GPU variant they take a GPU and the GPU image.
GPU_STEPS = ("calibrate", "parity", "probe")


@dataclass(frozen=True)
class StepResources:
    """Kubernetes quantities, e.g. cpu "500m"/"2", memory "512Mi"/"4Gi"."""

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str
    accelerator_type: str = ""  # e.g. "nvidia.com/gpu"; empty: none
    accelerator_limit: int = 0


def _r(cpu: str, cpu_limit: str, memory: str, memory_limit: str) -> StepResources:
    return StepResources(cpu_request=cpu, cpu_limit=cpu_limit, memory_request=memory, memory_limit=memory_limit)


# Peak memory measured on the demo's inputs (benchmarks/step_memory.py; docs/design.md: resources table):
# export 613 MiB, calibrate 328, drift 430, parity 591, probe 379 (tritonserver included), promote 244, finish 231,
# gate-blocked 81. Requests are about 1.5-2x the peak, limits 2x the request; one CPU for the steps that compute,
# less for the others.
DEFAULTS: Mapping[str, StepResources] = {
    "export": _r("1", "2", "1Gi", "2Gi"),
    "calibrate": _r("1", "2", "768Mi", "1536Mi"),
    "drift": _r("1", "2", "768Mi", "1536Mi"),  # memory bounded by the record-batch size, not by rows
    "parity": _r("1", "2", "1Gi", "2Gi"),
    "probe": _r("1", "2", "768Mi", "1536Mi"),  # the step and the tritonserver it may start, in one container
    "compare": _r("500m", "1", "768Mi", "1536Mi"),  # two ONNX Runtime sessions over the eval set
    "estimate": _r("500m", "1", "768Mi", "1536Mi"),  # one session, eval and current data in record batches
    "promote": _r("500m", "1", "512Mi", "1Gi"),
    "nightly-drift": _r("1", "2", "768Mi", "1536Mi"),
    "blocked": _r("100m", "500m", "256Mi", "512Mi"),  # gate-blocked / drift-blocked: read a verdict, fail
    "finish": _r("250m", "1", "384Mi", "768Mi"),  # the exit handler: the MLflow client only
}
STEPS = tuple(DEFAULTS)


def load_resources(path: Path | None = None, *, variant: Variant = "cpu") -> dict[str, StepResources]:
    """The defaults, with the GPU variant's accelerators, overlaid by `path` (or `$SKEWGATE_RESOURCES`)."""
    resources = dict(DEFAULTS)
    if variant == "gpu":
        for step in GPU_STEPS:
            resources[step] = dataclasses.replace(resources[step], accelerator_type=GPU, accelerator_limit=1)
    source = path or (Path(os.environ["SKEWGATE_RESOURCES"]) if os.environ.get("SKEWGATE_RESOURCES") else None)
    if source is None:
        return resources
    for step, fields in _read(source).items():
        if step not in resources:
            raise InputError(source, field=step, expected=f"a step name, one of {', '.join(STEPS)}", found=step)
        if not isinstance(fields, dict):
            raise InputError(source, field=step, expected="an object of resource fields",
                             found=type(fields).__name__)
        known = {f.name for f in dataclasses.fields(StepResources)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise InputError(source, field=f"{step}.{unknown[0]}", expected=f"one of {', '.join(sorted(known))}",
                             found=unknown[0])
        for name, value in fields.items():
            wanted = int if name == "accelerator_limit" else str
            if not isinstance(value, wanted) or isinstance(value, bool):
                raise InputError(source, field=f"{step}.{name}", expected=f"a {wanted.__name__}",
                                 found=repr(value))
        resources[step] = dataclasses.replace(resources[step], **fields)
    return resources


def _read(source: Path) -> dict[str, Any]:
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise InputError(source, expected="a JSON file of per-step resources", found="no such file") from err
    except json.JSONDecodeError as err:
        raise InputError(source, expected="JSON", found=f"{err.msg} at line {err.lineno}") from err
    if not isinstance(data, dict):
        raise InputError(source, expected="a JSON object keyed by step", found=type(data).__name__)
    return data


def apply(task: Any, step: str, resources: Mapping[str, StepResources], *, gpu_image: str = "") -> Any:
    """Set `step`'s requests and limits on a KFP task; with an accelerator, also its type, limit and image."""
    spec = resources[step]
    task.set_cpu_request(spec.cpu_request).set_cpu_limit(spec.cpu_limit)
    task.set_memory_request(spec.memory_request).set_memory_limit(spec.memory_limit)
    if spec.accelerator_type and spec.accelerator_limit:
        task.set_accelerator_type(spec.accelerator_type).set_accelerator_limit(spec.accelerator_limit)
        if gpu_image:
            task.set_container_image(gpu_image)
    return task


def one_line_descriptions(pipeline: Any) -> Any:
    """Docstring `Args:` wrap over lines; the KFP UI shows each description best as one line: the pipeline's
    parameters (its run form) and its components' inputs and outputs. KFP's importers get a description of
    their `uri` too, so that every component parameter has one."""
    spec = pipeline.pipeline_spec
    executors = dict(spec.deployment_spec.items()).get("executors", {})
    for component in spec.components.values():
        label = component.executor_label
        uri = component.input_definitions.parameters.get("uri")
        if label in executors and "importer" in executors[label] and uri is not None and not uri.description:
            uri.description = "URI of the artifact to import (bound to a pipeline parameter)."
    for definitions in [spec.root.input_definitions, spec.root.output_definitions,
                        *(c.input_definitions for c in spec.components.values()),
                        *(c.output_definitions for c in spec.components.values())]:
        for parameter in [*definitions.parameters.values(), *definitions.artifacts.values()]:
            parameter.description = " ".join(parameter.description.split())
    return pipeline
