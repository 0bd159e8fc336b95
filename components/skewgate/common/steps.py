"""The names of the gating steps, for the commands that enforce a policy over them (promote, verify).

`RELEASE_GATE_STEPS` is what a release needs by default: every gate of the release-gate pipeline. A required step
may be spelt as the pipeline's task name (`triton-probe` for `probe`); anything else unknown is an `UnknownStep`
naming the closest valid name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from skewgate.common.errors import InputError

# The registry alias a release moves and a deployment loads (every `alias` option and parameter defaults to it;
# KFP component signatures spell it out, and tests hold them equal).
DEFAULT_ALIAS = "champion"
RELEASE_GATE_STEPS: tuple[str, ...] = ("export", "calibrate", "drift", "parity", "probe", "compare")
# Every step that writes a verdict a policy can require (the names its verdicts carry as `step`).
STEPS: tuple[str, ...] = (*RELEASE_GATE_STEPS, "preprocess", "estimate")
# The release-gate pipeline's task names (pipelines/release_gate.py), accepted for the step each task runs.
TASK_NAMES: dict[str, str] = {"calibrate-int8": "calibrate", "drift-gate": "drift", "parity-diff": "parity",
                              "triton-probe": "probe", "compare-champion": "compare", "estimate-accuracy": "estimate"}


def split_steps(text: str) -> tuple[str, ...]:
    """`export, drift` → ("export", "drift"): the `--require` / `required_steps` spelling."""
    return tuple(s.strip() for s in text.split(",") if s.strip())


class UnknownStep(InputError):
    """A required step that no step is called: named with the closest valid name and the list of valid ones."""

    def __init__(self, name: str, *, source: str) -> None:
        valid = [*STEPS, *TASK_NAMES]
        super().__init__(source, expected=f"one of {', '.join(valid)}", found=f"unknown step {name!r}")
        close = difflib.get_close_matches(name.lower(), valid, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        self.args = (f"unknown step {name!r} in {source}{hint} valid: {', '.join(STEPS)} "
                     f"(or the pipeline's task names {', '.join(TASK_NAMES)})",)


def resolve_steps(names: Iterable[str], *, source: str = "the required steps") -> tuple[str, ...]:
    """The step names `names` mean, in order, each once: a pipeline task name (`triton-probe`) stands for its step
    (`probe`); any other unknown name is an `UnknownStep` (which names `source`, e.g. `--require`)."""
    resolved: list[str] = []
    for name in names:
        key = name.strip().lower()
        step = key if key in STEPS else TASK_NAMES.get(key)
        if step is None:
            raise UnknownStep(name, source=source)
        if step not in resolved:
            resolved.append(step)
    return tuple(resolved)
