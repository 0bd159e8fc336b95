"""State pairs of a step model (`IN=OUT`: a state input and the output of its next value), as `--state` flags and
the components' comma-separated parameters give them; and the zero state of a given shape."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec


def parse_states(pairs: Iterable[str]) -> dict[str, str]:
    """`["h=h_next", "k=k_next,v=v_next"]` → {"h": "h_next", "k": "k_next", "v": "v_next"}: each item may hold
    several pairs, comma-separated (a KFP parameter), and empty parts are skipped; a malformed or repeated pair
    is an `InputError`."""
    states: dict[str, str] = {}
    for pair in (part.strip() for item in pairs for part in item.split(",")):
        if not pair:
            continue
        state_in, sep, state_out = pair.partition("=")
        if not sep or not state_in or not state_out:
            raise InputError("--state", expected="IN=OUT (a STEP input name = the STEP output of its next value)",
                             found=repr(pair))
        if state_in in states:
            raise InputError("--state", field=state_in, expected="each state input once", found="given twice")
        states[state_in] = state_out
    return states


def zero_state(spec: TensorSpec, batch: int) -> np.ndarray:
    """Zeros of the state input's shape and dtype, its dynamic dimensions taking the batch size."""
    return np.zeros(tuple(batch if d is None else d for d in spec.shape), dtype=spec.dtype)
