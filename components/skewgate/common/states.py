"""State pairs of a step model (`IN=OUT`: a state input and the output of its next value), as `--state` flags and
the components' comma-separated parameters give them; the zero state of a given shape; and an initial-state file
read against the state inputs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec, load_npz


def parse_states(pairs: Iterable[str]) -> dict[str, str]:
    """`["h=h_next", "k=k_next,v=v_next"]` → {"h": "h_next", "k": "k_next", "v": "v_next"}: each item may hold
    several pairs, comma-separated (a KFP parameter), and empty parts are skipped; a malformed or repeated pair
    is an `InputError`."""
    states: dict[str, str] = {}
    for pair in (part.strip() for item in pairs for part in item.split(",")):
        if not pair:
            continue
        state_in, sep, state_out = (side.strip() for side in pair.partition("="))
        if not sep or not state_in or not state_out or "=" in state_out:
            raise InputError("--state", expected="IN=OUT (a STEP input name = the STEP output of its next value)",
                             found=repr(pair))
        if state_in in states:
            raise InputError("--state", field=state_in, expected="each state input once", found="given twice")
        states[state_in] = state_out
    return states


def zero_state(spec: TensorSpec, batch: int) -> np.ndarray:
    """Zeros of the state input's shape and dtype, its dynamic dimensions taking the batch size."""
    return np.zeros(tuple(batch if d is None else d for d in spec.shape), dtype=spec.dtype)


def read_initial_state(path: str | Path, specs: Mapping[str, TensorSpec], *,
                       shape: Callable[[str, TensorSpec, np.ndarray], str | None]) -> dict[str, np.ndarray]:
    """The `.npz` at `path` keyed by state input: exactly the names of `specs`, each array of its spec's dtype and
    of the shape the caller accepts (`shape(name, spec, array)`: None when it fits, else what was expected). Each
    problem is an `InputError` naming the file and the array."""
    arrays = load_npz(path)
    unknown = sorted(set(arrays) - set(specs))
    if unknown:
        raise InputError(path, field=", ".join(unknown), expected=f"arrays named as the state inputs {sorted(specs)}",
                         found="no such state input")
    state = {}
    for name, spec in specs.items():
        if name not in arrays:
            raise InputError(path, field=name, expected=f"the initial state {spec.describe()}",
                             found=f"no such array (arrays: {sorted(arrays)})")
        array = arrays[name]
        expected = shape(name, spec, array)
        if expected is not None:
            raise InputError(path, field=name, expected=expected, found=f"shape {list(array.shape)}")
        if array.dtype != np.dtype(spec.dtype):
            raise InputError(path, field=name, expected=f"dtype {spec.dtype}", found=f"dtype {array.dtype}")
        state[name] = array
    return state
