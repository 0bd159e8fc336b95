"""Stream equals batch: a sequence model as evaluated (FULL: whole sequences, time on axis 1) against the model as
served (STEP: one time step, its state fed back between calls).

Pure: paths and arrays in, checks and a details dict out; ONNX Runtime through `common/runtime.py`.

- FULL's non-state inputs carry time on axis 1 (batch on axis 0); its outputs are per step on axis 1, or the last
  step's only when an output has no time axis (the details say which, per output).
- STEP takes the same non-state inputs with the time axis removed, plus each state input `IN`, and returns each
  next state `OUT` (`states`: IN → OUT). A state input's shape comes from STEP's graph, its dynamic dimensions
  taking the batch size; it starts at zeros unless an initial state is given (an .npz keyed by state input name,
  each array of the state's shape, its batch dimension 1 to broadcast to every sequence).
- STEP's non-state outputs pair with FULL's outputs by name when the names agree, else by position.

Checks:
- `stream.matches_batch`: STEP driven step by step, state fed back, reproduces FULL's ONNX Runtime outputs at every
  step (FULL against PyTorch is `outputs_match.*`'s, in the same verdict). Tolerance per output: the one parity
  judges FULL with (grounded in the model's float64 rounding, `common/rounding.py`), widened to at least the dtype
  default × √steps — the step loop rounds in a different order than the whole-sequence graph, and independent
  rounding errors add up like a random walk over the steps. The detail names the first diverging step and output.
- `stream.state_used`: each state input, perturbed, changes STEP's non-state outputs beyond tolerance (a state
  input that is ignored, or constant-folded away, fails).
- `stream.reset`: two sequences back to back (the samples, then the same samples rolled along the batch), the state
  reset to the initial state between them, give the second its own outputs (FULL's on it: its outputs on the
  samples, rolled with them, as FULL is batch invariant — export's check); running the second from
  the first's final state instead is reported as the contamination the reset prevents (its size, and the steps it
  lasts).

With `layerwise`, a divergence is localised at the first diverging step to the first nn.Module whose output differs
between STEP and FULL there (`_localise`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.compare import Closeness, ClosenessAlong, Tolerance, compare_along, compare_close
from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec, check_array, load_onnx, onnx_input_specs, sha256_file
from skewgate.common.runtime import run_by_name, session
from skewgate.common.states import read_initial_state, zero_state
from skewgate.common.verdict import Check

PERTURBATION_SEED = 0


def stream_checks(*, step_onnx: str | Path, states: Mapping[str, str], feeds: Mapping[str, np.ndarray],
                  full: Mapping[str, np.ndarray] | Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
                  full_outputs: list[str],
                  tolerances: Mapping[str, Tolerance], initial_state: str | Path | None = None,
                  full_onnx: str | Path = "FULL", layerwise: bool = False) -> tuple[list[Check], dict[str, Any]]:
    """The three stream checks and the verdict's `details.stream`.

    `feeds`: FULL's inputs (time on axis 1); `full`: FULL's (ONNX Runtime) outputs on them by name, or what runs
    FULL on such feeds (parity passes the outputs its own pass computed: FULL is not run twice);
    `full_outputs`: FULL's output names in order; `tolerances`: per FULL output, before the √steps floor;
    `full_onnx`: FULL's file, as error messages name it; `layerwise`: localise a divergence at the first
    diverging step to the first module whose output diverges (`_localise`)."""
    step = _Step.bind(step_onnx, states=states, feeds=feeds, full_outputs=full_outputs, tolerances=tolerances,
                      full_onnx=full_onnx)
    init = _initial_state(initial_state, {name: step.specs[name] for name in states}, step.batch)
    full_values = dict(full) if isinstance(full, Mapping) else full(dict(feeds))
    produced, fed = step.drive(feeds, init)
    kinds: dict[str, str] = {}
    for name in full_outputs:
        step.reference(name, full_values, produced)  # FULL's output has STEP's shape, with or without a time axis
        timed = full_values[name].ndim == produced[step.pairs[name]][0].ndim + 1
        kinds[name] = "per step (axis 1)" if timed else "last step only (FULL returns no time axis)"
    rows, first, worst = step.compare(produced, full_values)
    located = None
    if layerwise and first is not None:
        located = _localise(step.model, load_onnx(full_onnx), feeds, fed[first[0]], first[0], step.steps)
    used = _state_used(step, feeds, fed)
    reset_first, reset_worst, contamination = _reset(step, feeds, full_values, init, fed[-1])
    checks = [_matches_check(first, worst, step.steps, kinds, step.pairs, located), _state_used_check(used),
              _reset_check(reset_first, reset_worst, contamination)]
    details = {
        "step_model": str(step_onnx), "step_sha256": sha256_file(step_onnx), "states": dict(states),
        "initial_state": str(initial_state) if initial_state else "zeros", "steps": step.steps,
        "samples": step.batch,
        "outputs": {name: {"step_output": step.pairs[name], "compared": kinds[name],
                           "tolerance": {"rtol": step.tols[name].rtol, "atol": step.tols[name].atol}}
                    for name in full_outputs},
        "pairing": step.pairing,
        "tolerance_rule": "parity's tolerance for the FULL output, at least the float32 default × √steps",
        "first_divergence": _where(first) if located is None else {**(_where(first) or {}), "layerwise": located},
        "worst_ratio_per_step": {name: [r for _, r in found] for name, found in rows.items()},
        "state_used": used,
        "reset": {"first_divergence": _where(reset_first), "worst_ratio": reset_worst,
                  "contamination_without_reset": contamination},
    }
    return checks, details


Divergence = tuple[int, str, Closeness]  # (step, FULL output, how far apart)


@dataclass(frozen=True, kw_only=True)
class _Step:
    """STEP bound to FULL's inputs and outputs: which of its inputs and outputs are state, how its outputs pair with
    FULL's, the sequence length and batch, and the tolerance per FULL output."""

    path: str | Path
    model: Any
    session: Any
    specs: Mapping[str, TensorSpec]
    states: Mapping[str, str]
    plain_inputs: list[str]
    step_outputs: list[str]
    full_outputs: list[str]
    full_onnx: str | Path
    pairs: Mapping[str, str]  # FULL output → STEP output
    pairing: str
    steps: int
    batch: int
    tols: Mapping[str, Tolerance]

    @classmethod
    def bind(cls, step_onnx: str | Path, *, states: Mapping[str, str], feeds: Mapping[str, np.ndarray],
             full_outputs: list[str], tolerances: Mapping[str, Tolerance], full_onnx: str | Path) -> _Step:
        """STEP's file checked against the state pairs and FULL's feeds and outputs (an `InputError` naming the
        file and what does not fit)."""
        if not states:
            raise InputError("--state", expected="at least one IN=OUT pair with --stream-onnx", found="none")
        model = load_onnx(step_onnx)
        specs = {s.name: s for s in onnx_input_specs(model)}
        outputs = [o.name for o in model.graph.output]
        for state_in, state_out in states.items():
            if state_in not in specs:
                raise InputError(step_onnx, field=f"state input {state_in!r}", expected=f"one of STEP's inputs "
                                 f"{sorted(specs)}", found="no such input")
            if state_out not in outputs:
                raise InputError(step_onnx, field=f"state output {state_out!r}", expected=f"one of STEP's outputs "
                                 f"{outputs}", found="no such output")
        plain_inputs = [name for name in specs if name not in states]
        if sorted(plain_inputs) != sorted(feeds):
            raise InputError(step_onnx, field="inputs", expected=f"FULL's inputs {sorted(feeds)} plus the state "
                             f"inputs {sorted(states)}", found=f"{sorted(specs)}")
        step_outputs = [name for name in outputs if name not in set(states.values())]
        if not step_outputs:
            raise InputError(step_onnx, field="outputs", expected="at least one output besides the next states",
                             found=f"{outputs}")
        if set(step_outputs) == set(full_outputs):
            pairing, pairs = "by name", {name: name for name in full_outputs}
        elif len(step_outputs) == len(full_outputs):
            pairing, pairs = "by position", dict(zip(full_outputs, step_outputs, strict=True))
        else:
            raise InputError(step_onnx, field="outputs", expected=f"{len(full_outputs)} non-state outputs pairing "
                             f"with FULL's {full_outputs}", found=f"{step_outputs}")
        lengths = {name: array.shape[1] if array.ndim >= 2 else None for name, array in feeds.items()}
        steps = next(iter(lengths.values()))
        if steps is None or any(length != steps for length in lengths.values()):
            raise InputError("--inputs", field="time axis", expected="every array with the same length on axis 1 "
                             "(batch on axis 0)", found=f"{lengths}")
        for name in plain_inputs:
            check_array(np.ascontiguousarray(feeds[name][:, 0]), specs[name], source=f"{step_onnx} (one step "
                        "of --inputs)")
        # independent rounding errors of the step loop add up like a random walk over the steps
        floor, scale = Tolerance.for_dtype(np.float32), math.sqrt(steps)
        tols = {name: Tolerance(rtol=max(given.rtol, floor.rtol * scale), atol=max(given.atol, floor.atol * scale))
                for name, given in ((n, tolerances.get(n, floor)) for n in full_outputs)}
        # ORT's threads may spin between runs here: the runs come back to back, with little else between them
        # (spinning off, the same calls took 1.9× a plain loop's time; on, 1.3×: benchmarks/stream_bench.py)
        return cls(path=step_onnx, model=model, session=session(model, spinning=True), specs=specs, states=states,
                   plain_inputs=plain_inputs, step_outputs=step_outputs, full_outputs=full_outputs,
                   full_onnx=full_onnx, pairs=pairs, pairing=pairing, steps=steps,
                   batch=len(next(iter(feeds.values()))), tols=tols)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_by_name(self.session, feeds)

    def drive(self, inputs: Mapping[str, np.ndarray], start: Mapping[str, np.ndarray]
              ) -> tuple[dict[str, list[np.ndarray]], list[dict[str, np.ndarray]]]:
        """STEP over every step: its non-state outputs per step, and the state fed at each step (+ the last)."""
        # what each step needs, looked up once: this loop's own work per step is what stream mode adds to the
        # plain step calls (benchmarks/stream_bench.py)
        names = [o.name for o in self.session.get_outputs()]
        kept: list[tuple[int, list[np.ndarray]]] = [(names.index(name), []) for name in self.step_outputs]
        carried = [(state_in, names.index(state_out), np.dtype(self.specs[state_in].dtype))
                   for state_in, state_out in self.states.items()]
        # time-major once (one copy per input, not one per step): each step's slice is then contiguous
        by_step = [(n, np.ascontiguousarray(np.moveaxis(inputs[n], 1, 0))) for n in self.plain_inputs]
        state, fed, run = dict(start), [], self.session.run
        for t in range(self.steps):
            fed.append(state)
            feeds = {n: time_major[t] for n, time_major in by_step}
            feeds.update(state)
            values = run(None, feeds)
            for index, per_step in kept:
                per_step.append(values[index])
            state = {}
            for state_in, index, dtype in carried:
                given, made = fed[-1][state_in], values[index]
                if made.shape != given.shape or made.dtype != dtype:
                    raise InputError(self.path, field=f"state output {self.states[state_in]!r}", expected=f"the "
                                     f"state input {state_in!r}'s {dtype}{list(given.shape)}",
                                     found=f"{made.dtype}{list(made.shape)}")
                state[state_in] = made
        fed.append(state)
        return {name: per_step for name, (_, per_step) in zip(self.step_outputs, kept, strict=True)}, fed

    def reference(self, name: str, full_values: Mapping[str, np.ndarray],
                  produced: Mapping[str, list[np.ndarray]]) -> tuple[np.ndarray, list[int]]:
        """FULL's output step-major (index `i`: its output at step `at[i]`), and the steps `at` STEP's output is
        compared at."""
        value, one = full_values[name], produced[self.pairs[name]][0]
        if value.ndim == one.ndim + 1 and value.shape[1] == self.steps:
            return np.moveaxis(value, 1, 0), list(range(self.steps))  # a view: compared without a stacked copy
        if value.shape == one.shape:
            return value[np.newaxis], [self.steps - 1]
        raise InputError(self.full_onnx, field=f"output {name!r}", expected=f"STEP's {self.pairs[name]!r} "
                         f"{list(one.shape)} with a time axis of {self.steps} on axis 1, or without one",
                         found=f"{list(value.shape)}")

    def compare(self, produced: Mapping[str, list[np.ndarray]], full_values: Mapping[str, np.ndarray]
                ) -> tuple[dict[str, list[tuple[int, float]]], Divergence | None, float]:
        """Per output, (step, worst ratio) at each compared step; the first diverging (step, output) with its
        closeness; the worst ratio. Every step in one vectorised pass; only the first divergence is described."""
        found: dict[str, list[tuple[int, float]]] = {}
        diverged = []
        for order, name in enumerate(self.full_outputs):
            expected, at = self.reference(name, full_values, produced)
            actual = [produced[self.pairs[name]][t] for t in at]
            along = _along(actual, expected, self.tols[name])
            found[name] = list(zip(at, along.worst_ratio.tolist(), strict=True))
            bad = np.flatnonzero(~along.ok)
            if bad.size:
                i = int(bad[0])
                diverged.append((at[i], order, name, compare_close(actual[i], expected[i], self.tols[name])))
        first = min(diverged, key=lambda row: row[:2]) if diverged else None
        worst = max((r for rows in found.values() for _, r in rows), default=math.inf)
        return found, (first[0], first[2], first[3]) if first else None, worst


def _state_used(step: _Step, feeds: Mapping[str, np.ndarray], fed: list[dict[str, np.ndarray]]
                ) -> dict[str, dict[str, Any]]:
    """From the state fed at step 1 (the first one STEP produced itself), each state input perturbed: how far
    STEP's outputs move (an integer state, a position counter, is not perturbed)."""
    probe = 1 if step.steps > 1 else 0
    probe_feeds = {n: np.ascontiguousarray(feeds[n][:, probe]) for n in step.plain_inputs}
    base_values = step.run({**probe_feeds, **fed[probe]})
    rng = np.random.default_rng(PERTURBATION_SEED)
    used: dict[str, dict[str, Any]] = {}
    for state_in in step.states:
        state = fed[probe][state_in]
        if state.dtype.kind != "f":
            used[state_in] = {"judged": False, "why": f"a {state.dtype} state is not perturbed"}
            continue
        spread = max(1.0, float(np.std(state)))
        perturbed = (state + rng.normal(scale=spread, size=state.shape)).astype(state.dtype)
        values = step.run({**probe_feeds, **fed[probe], state_in: perturbed})
        moved = {name: compare_close(values[step.pairs[name]], base_values[step.pairs[name]], step.tols[name])
                 for name in step.full_outputs}
        used[state_in] = {"judged": True, "step": probe, "perturbation_std": spread,
                          "worst_ratio": max(c.worst_ratio for c in moved.values()),
                          "max_abs_change": max(c.max_abs for c in moved.values())}
    return used


def _reset(step: _Step, feeds: Mapping[str, np.ndarray], full_values: Mapping[str, np.ndarray],
           init: Mapping[str, np.ndarray], final_state: Mapping[str, np.ndarray]
           ) -> tuple[Divergence | None, float, dict[str, Any]]:
    """The second sequence from the initial state against FULL's own outputs on it (first divergence, worst
    ratio); and from the first's final state, the contamination a missing reset would cause. FULL's outputs on the
    rolled samples are its outputs rolled with them (each sample's outputs are its own wherever it sits in the
    batch: export's batch invariance), so FULL is not run again."""
    second = {name: np.roll(array, step.batch // 2, axis=0) for name, array in feeds.items()}
    second_full = {name: np.roll(value, step.batch // 2, axis=0) for name, value in full_values.items()}
    reset_out, _ = step.drive(second, init)
    _, first, worst = step.compare(reset_out, second_full)
    contamination: dict[str, Any] = {}
    try:
        carried_out, _ = step.drive(second, final_state)
    except InputError:
        raise
    except Exception as err:  # STEP cannot go on from a finished sequence (a full KV cache): that is contamination too
        contamination["error"] = f"STEP fails to run from the first sequence's final state: {type(err).__name__}: " \
                                 f"{str(err)[:200]}"
        carried_out = {}
    for name in step.full_outputs if carried_out else ():
        per_step = _along(carried_out[step.pairs[name]], reset_out[step.pairs[name]], step.tols[name])
        beyond = np.flatnonzero(~per_step.ok).tolist()
        contamination[name] = {"max_abs": float(per_step.max_abs.max()),
                               "worst_ratio": float(per_step.worst_ratio.max()),
                               "steps_beyond_tolerance": len(beyond),
                               "last_step_beyond_tolerance": beyond[-1] if beyond else None}
    return first, worst, contamination


def _initial_state(path: str | Path | None, specs: Mapping[str, TensorSpec], batch: int) -> dict[str, np.ndarray]:
    """Zeros of each state's shape (dynamic dimensions take the batch size), or the file's arrays broadcast along
    the batch."""
    shapes = {name: tuple(batch if d is None else d for d in spec.shape) for name, spec in specs.items()}
    if path is None:
        return {name: zero_state(spec, batch) for name, spec in specs.items()}

    def batch_or_one(name: str, spec: TensorSpec, array: np.ndarray) -> str | None:
        want = shapes[name]
        batch_axes = [axis for axis, d in enumerate(spec.shape) if d is None]
        if array.ndim == len(want) and all(got == size or (axis in batch_axes and got == 1)
                                           for axis, (got, size) in enumerate(zip(array.shape, want, strict=True))):
            return None
        return f"shape {list(want)} (batch dimension {batch} or 1), as STEP's {spec.describe()}"

    return {name: np.ascontiguousarray(np.broadcast_to(array, shapes[name]))
            for name, array in read_initial_state(path, specs, shape=batch_or_one).items()}


def _along(actual: list[np.ndarray], expected: list[np.ndarray] | np.ndarray, tolerance: Tolerance
           ) -> ClosenessAlong:
    """`compare_close` at each step, vectorised when every step's arrays share one shape (else one by one, a
    shape mismatch counting as out of tolerance everywhere). `expected` may be one array, step on axis 0."""
    shapes = {a.shape for a in actual} | {e.shape for e in expected}
    if len(shapes) == 1:
        stacked = expected if isinstance(expected, np.ndarray) else np.stack(expected)
        return compare_along(np.stack(actual), stacked, tolerance, axis=0)
    each = [compare_close(a, e, tolerance) for a, e in zip(actual, expected, strict=True)]
    return ClosenessAlong(max_abs=np.array([c.max_abs for c in each]), worst_ratio=np.array([c.worst_ratio
                          for c in each]), mismatched=np.array([c.mismatched for c in each]))


def _where(first: tuple[int, str, Closeness] | None) -> dict[str, Any] | None:
    if first is None:
        return None
    t, name, closeness = first
    return {"step": t, "output": name, "max_abs": closeness.max_abs, "worst_ratio": closeness.worst_ratio,
            "mismatched": closeness.mismatched, "total": closeness.total}


def _matches_check(first: tuple[int, str, Closeness] | None, worst: float, steps: int, kinds: Mapping[str, str],
                   pairs: Mapping[str, str], located: Mapping[str, Any] | None = None) -> Check:
    compared = "; ".join(f"{name} ↔ STEP {pairs[name]}: {kind}" for name, kind in kinds.items())
    if first is None:
        return Check("stream.matches_batch", passed=True, value=worst, limit=1.0,
                     detail=f"STEP with its state fed back matches FULL at every one of {steps} steps ({compared})")
    t, name, closeness = first
    return Check("stream.matches_batch", passed=False, value=worst, limit=1.0,
                 detail=f"STEP diverges from FULL first at step {t}, output {name!r}: {closeness.describe()} "
                        f"({compared})" + (f"; layerwise at step {t}: {located['summary']}" if located else ""))


LAYER_FLOOR = Tolerance(rtol=1e-4, atol=1e-4)  # intermediates: parity's layer floor (rounding accumulates)


def _localise(step_model: Any, full_model: Any, feeds: Mapping[str, np.ndarray], state: Mapping[str, np.ndarray],
              t: int, steps: int) -> dict[str, Any]:
    """At the first diverging step `t`: each nn.Module's output in STEP (fed step `t` and the state it carried
    there) against the same module's in FULL (its `t`-th call when FULL calls it once per step, else its one
    call's output at `t` on axis 1), both on ONNX Runtime; modules pair by path (STEP's may sit under a wrapper:
    `full.wh` ↔ `wh`). Names the first module, in STEP's order, whose output diverges; ops outside any module
    (the root's) are not compared, so the module named may inherit its error from them."""
    from skewgate.common.layers import with_intermediates

    step_calls, full_calls = _module_calls(step_model), _module_calls(full_model)
    pairs, skipped = [], {}
    for module, outs in step_calls.items():
        twin = next((m for m in full_calls if m == module or module.endswith("." + m) or m.endswith("." + module)),
                    None)
        if twin is None:
            skipped[module] = "no module of that path in FULL"
        elif len(full_calls[twin]) in (1, steps):
            pairs.append((module, outs[0], twin, full_calls[twin][0 if len(full_calls[twin]) == 1 else t]))
        else:
            skipped[module] = f"FULL calls {twin!r} {len(full_calls[twin])} times over {steps} steps"
    if not pairs:
        return {"summary": "no nn.Module pairs between STEP and FULL to compare", "compared": [],
                "not_compared": skipped}
    step_feeds = {**{n: np.ascontiguousarray(a[:, t]) for n, a in feeds.items()}, **state}
    step_values = run_by_name(session(with_intermediates(step_model, [p[1] for p in pairs]), arena=False),
                              step_feeds)
    full_values = run_by_name(session(with_intermediates(full_model, [p[3] for p in pairs]), arena=False),
                              dict(feeds))
    floor = math.sqrt(steps)
    tol = Tolerance(rtol=LAYER_FLOOR.rtol * floor, atol=LAYER_FLOOR.atol * floor)
    compared, first = [], None
    for module, step_value, twin, full_value in pairs:
        mine, theirs = step_values[step_value], full_values[full_value]
        if theirs.ndim == mine.ndim + 1 and theirs.shape[1] == steps:
            theirs = theirs[:, t]
        if theirs.shape != mine.shape:
            skipped[module] = f"shapes differ: STEP {list(mine.shape)}, FULL {list(theirs.shape)}"
            continue
        closeness = compare_close(mine, theirs, tol)
        compared.append({"module": module, "full_module": twin, "step_value": step_value, "full_value": full_value,
                         "max_abs": closeness.max_abs, "worst_ratio": closeness.worst_ratio,
                         "diverged": not closeness.ok})
        if first is None and not closeness.ok:
            first = (module, twin, closeness)
    summary = (f"first diverging module {first[0]!r} (FULL {first[1]!r}): {first[2].describe()} (rtol {tol.rtol:.3g},"
               f" atol {tol.atol:.3g}; ops outside modules not compared)" if first else
               f"every one of {len(compared)} module outputs compared is within tolerance: the divergence comes "
               "from ops outside any module")
    return {"summary": summary, "module": first[0] if first else None, "compared": compared,
            "not_compared": skipped}


def _module_calls(model: Any) -> dict[str, list[str]]:
    """Per nn.Module path, in graph order, the last value of each call (a call: consecutive nodes of that module);
    the root's ops, and nodes the exporter attributes to no module, are left out."""
    from skewgate.common.layers import onnx_values

    calls: dict[str, list[str]] = {}
    previous = None
    for value in onnx_values(model).values():
        module = value.module
        if not module or module == "<root>" or module.startswith("_"):
            previous = None
            continue
        if module != previous:
            calls.setdefault(module, []).append(value.name)
        else:
            calls[module][-1] = value.name
        previous = module
    return calls


def _state_used_check(used: Mapping[str, Mapping[str, Any]]) -> Check:
    judged = {name: info for name, info in used.items() if info["judged"]}
    if not judged:
        return Check("stream.state_used", passed=False, value=0.0, limit=1.0,
                     detail="no floating-point state input to perturb: nothing shows the state is used")
    ignored = [name for name, info in judged.items() if not info["worst_ratio"] > 1.0]
    value = min(info["worst_ratio"] for info in judged.values())
    text = ", ".join(f"{name}: outputs moved {info['max_abs_change']:.3g} (worst/tolerance "
                     f"{info['worst_ratio']:.3g})" for name, info in judged.items())
    if ignored:
        return Check("stream.state_used", passed=False, value=value, limit=1.0,
                     detail=f"perturbing state input(s) {ignored} leaves STEP's outputs within tolerance: the state "
                            f"is ignored or constant-folded ({text})")
    return Check("stream.state_used", passed=True, value=value, limit=1.0,
                 detail=f"perturbing each state input changes STEP's outputs ({text})")


def _reset_check(first: tuple[int, str, Closeness] | None, worst: float,
                 contamination: Mapping[str, Mapping[str, Any]]) -> Check:
    carried = contamination.get("error") or "; ".join(
        f"{name}: max |Δ| {info['max_abs']:.3g}, worst/tolerance {info['worst_ratio']:.3g}, "
        f"{info['steps_beyond_tolerance']} steps beyond tolerance" for name, info in contamination.items())
    prevented = f"without the reset (second sequence from the first's final state): {carried}"
    if first is None:
        return Check("stream.reset", passed=True, value=worst, limit=1.0,
                     detail=f"reset to the initial state, the second sequence gives its own outputs; {prevented}")
    t, name, closeness = first
    return Check("stream.reset", passed=False, value=worst, limit=1.0,
                 detail=f"reset to the initial state, the second sequence diverges from its own outputs first at "
                        f"step {t}, output {name!r}: {closeness.describe()}; {prevented}")
