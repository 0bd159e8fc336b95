"""The stateful probe: a STEP model served under Triton's sequence batcher, its state kept on the server, judged
sequence by sequence against STEP run alone in ONNX Runtime from the initial state.

Each sample of the probe inputs (batch on axis 0, time on axis 1) is one sequence, sent one step per request
(batch 1) under its own correlation id, with the start flag on its first step and the end flag on its last. The
reference is STEP in ONNX Runtime, each sequence alone (batch 1), its state fed back, from the initial state.
Three runs, three checks:

- `stream.sequences_match`: the sequences one after another, each on a fresh correlation id;
- `stream.isolation`: the sequences interleaved, step t of every sequence sent together (concurrently, so the
  batcher may batch them) before step t + 1 of any, on fresh correlation ids: no sequence may see another's state;
- `stream.reset`: a sequence started on each correlation id the first run ended, on another sample: it must start
  from the initial state, not from what the id's previous sequence left.

Tolerance per output: the probe's (`--tolerance`, else the dtype's default), times √steps — the state carries
rounding from step to step, and batching on the server rounds in another order than the reference run alone.
A failed check names the sequence (correlation id and sample), the first diverging step and the output.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from skewgate.common.compare import Closeness, Tolerance, compare_close
from skewgate.common.errors import InputError, Rejected
from skewgate.common.triton.client import SequenceStep, ServerRefused, Triton
from skewgate.common.triton.repository import Signature
from skewgate.common.verdict import Check

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class StreamProbing:
    """What the stateful probe needs besides the gated STEP."""

    states: Mapping[str, str]  # state input → state output
    initial: Mapping[str, np.ndarray]  # one sequence's initial state (batch 1), by state input
    initial_source: str  # "zeros", or the file it came from
    first_correlation_id: int  # the runs use consecutive ids from here (random by default: a live server's own
    # sequences must not be hit)


@dataclass(frozen=True)
class Divergence:
    """The first step at which a served sequence leaves its reference (or the request that failed)."""

    correlation_id: int
    sample: int
    step: int
    output: str
    closeness: Closeness | None = None
    error: str = ""

    def describe(self) -> str:
        where = f"sequence {self.correlation_id} (sample {self.sample})"
        if self.error:
            return f"{where}: step {self.step} failed on the server: {self.error}"
        assert self.closeness is not None
        return f"{where} diverges first at step {self.step}, output {self.output!r}: {self.closeness.describe()}"

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"correlation_id": self.correlation_id, "sample": self.sample, "step": self.step,
                                 "output": self.output}
        if self.error:
            found["error"] = self.error
        elif self.closeness is not None:
            found.update(max_abs=self.closeness.max_abs, worst_ratio=self.closeness.worst_ratio)
        return found


def sequence_feeds(feeds: Mapping[str, np.ndarray], source: str = "--inputs") -> tuple[int, int]:
    """(sequences, steps) of the probe inputs: every array [batch, time, …] with the same batch and time."""
    shapes = {name: array.shape for name, array in feeds.items()}
    if not shapes or any(len(shape) < 2 for shape in shapes.values()) or len(
            {shape[:2] for shape in shapes.values()}) != 1:
        raise InputError(source, field="batch and time axes", expected="every STEP input as an array with the same "
                         "batch (axis 0) and time (axis 1) lengths",
                         found=str({name: list(shape) for name, shape in shapes.items()}))
    sequences, steps = next(iter(shapes.values()))[:2]
    if not sequences or not steps:
        raise InputError(source, field="batch and time axes", expected="at least one sequence of one step",
                         found=f"{sequences} sequences of {steps} steps")
    return int(sequences), int(steps)


def stream_checks(triton: Triton, *, model: str, step: Callable[[Mapping[str, np.ndarray]], Arrays],
                  served: Signature, feeds: Mapping[str, np.ndarray], stream: StreamProbing,
                  tolerances: Mapping[str, Tolerance], version: str = "") -> tuple[list[Check], dict[str, Any]]:
    """The three checks and the verdict's `details.stream`. `step`: STEP in ONNX Runtime (every output by name);
    `served`: STEP as the client sees it (no state tensors); `feeds`: the non-state inputs, [sequences, steps, …]."""
    sequences, steps = sequence_feeds(feeds)
    outputs = [t.name for t in served.outputs]
    reference = _reference(step, feeds, stream, outputs, sequences=sequences, steps=steps)
    scale = math.sqrt(steps)  # independent rounding errors add up like a random walk over the steps
    tols = {}
    for name in outputs:
        given = tolerances.get(name) or Tolerance.for_dtype(reference[0][0][name].dtype)
        tols[name] = Tolerance(rtol=given.rtol * scale, atol=given.atol * scale)

    base = stream.first_correlation_id
    alone = {base + i: i for i in range(sequences)}
    together = {base + sequences + i: i for i in range(sequences)}
    shift = max(1, sequences // 2) if sequences > 1 else 0
    again = {base + i: (i + shift) % sequences for i in range(sequences)}  # the first run's ids, other samples
    with _Sequences(triton, model=model, feeds=feeds, outputs=outputs, steps=steps, version=version,
                    datatypes={t.name: t.metadata_type for t in served.inputs}) as server:
        first, first_worst = _judge(server.one_after_another(alone), alone, reference, tols)
        mixed, mixed_worst = _judge(server.interleaved(together), together, reference, tols)
        reset, reset_worst = _judge(server.one_after_another(again), again, reference, tols)

    leaks = "; one after another every sequence matched: state leaks between sequences" if first is None else ""
    not_reset = "; on fresh ids every sequence matched: the state is not reset at START" if first is None else ""
    checks = [
        _check("stream.sequences_match", first, first_worst, f"{sequences} sequences of {steps} steps, one after "
               "another, each match STEP run alone from the initial state", lambda d: ""),
        _check("stream.isolation", mixed, mixed_worst, f"{sequences} sequences interleaved step by step each "
               "match STEP run alone: no sequence sees another's state",
               lambda d: f" — interleaved with {sequences - 1} other sequence(s){leaks}"),
        _check("stream.reset", reset, reset_worst, "a new sequence on each correlation id a finished sequence used "
               "starts from the initial state",
               lambda d: f" — started on correlation id {d.correlation_id} after sample {alone[d.correlation_id]}'s "
                         f"sequence ended there{not_reset}"),
    ]
    details = {
        "states": dict(stream.states), "initial_state": stream.initial_source, "sequences": sequences,
        "steps": steps, "correlation_ids": {"one_after_another": list(alone), "interleaved": list(together),
                                            "restarted": list(again)},
        "restarted_samples": {str(cid): sample for cid, sample in again.items()},
        "tolerance": {name: {"rtol": tol.rtol, "atol": tol.atol} for name, tol in tols.items()},
        "tolerance_rule": "the probe's tolerance for the output (default: by dtype) × √steps",
        "first_divergence": {name: divergence.as_json() if divergence else None for name, divergence in (
            ("sequences_match", first), ("isolation", mixed), ("reset", reset))},
    }
    return checks, details


def _one_step(feeds: Mapping[str, np.ndarray], sample: int, t: int) -> Arrays:
    return {name: np.ascontiguousarray(array[sample : sample + 1, t]) for name, array in feeds.items()}


def _reference(step: Callable[[Mapping[str, np.ndarray]], Arrays], feeds: Mapping[str, np.ndarray],
               stream: StreamProbing, outputs: list[str], *, sequences: int, steps: int) -> list[list[Arrays]]:
    """STEP run alone in ONNX Runtime on each sequence from the initial state: [sample][step] → outputs."""
    reference: list[list[Arrays]] = []
    for sample in range(sequences):
        state = {name: array.copy() for name, array in stream.initial.items()}
        produced = []
        for t in range(steps):
            values = step({**_one_step(feeds, sample, t), **state})
            produced.append({name: values[name] for name in outputs})
            state = {state_in: values[state_out] for state_in, state_out in stream.states.items()}
        reference.append(produced)
    return reference


class _Sequences:
    """Sequences sent to the server under the sequence batcher, one after another or interleaved step by step,
    each step's answer the outputs or the server's refusal as text. tritonclient's clients are not thread-safe:
    every worker thread gets its own connection, closed on exit."""

    def __init__(self, triton: Triton, *, model: str, feeds: Mapping[str, np.ndarray], outputs: list[str],
                 steps: int, version: str, datatypes: Mapping[str, str]) -> None:
        self.triton, self.model, self.feeds, self.outputs = triton, model, feeds, outputs
        self.steps, self.version, self.datatypes = steps, version, datatypes
        self._local = threading.local()
        self._opened: list[Triton] = []
        self._lock = threading.Lock()

    def __enter__(self) -> _Sequences:
        return self

    def __exit__(self, *exc: object) -> None:
        for extra in self._opened:
            extra.close()

    def send(self, sample: int, t: int, correlation_id: int) -> Arrays | str:
        """One step of one sequence: the outputs, or the server's refusal as text."""
        own: Triton | None  # this thread's client: the given one on the main thread, else its own
        if threading.current_thread() is threading.main_thread():
            own = self.triton
        elif (own := getattr(self._local, "client", None)) is None:
            own = self._local.client = self.triton.connect_again()
            with self._lock:
                self._opened.append(own)
        try:
            return own.infer(self.model, _one_step(self.feeds, sample, t), self.outputs, datatypes=self.datatypes,
                             version=self.version,
                             sequence=SequenceStep(correlation_id, start=t == 0, end=t == self.steps - 1))
        except Rejected as err:
            return err.answer if isinstance(err, ServerRefused) else str(err)

    def one_after_another(self, samples: Mapping[int, int]) -> dict[int, list[Arrays | str]]:
        """correlation id → sample: each sequence whole before the next; a refused step ends its sequence."""
        results: dict[int, list[Arrays | str]] = {}
        for correlation_id, sample in samples.items():
            results[correlation_id] = []
            for t in range(self.steps):
                results[correlation_id].append(self.send(sample, t, correlation_id))
                if isinstance(results[correlation_id][-1], str):
                    break
        return results

    def interleaved(self, samples: Mapping[int, int]) -> dict[int, list[Arrays | str]]:
        """Step t of every sequence (concurrently) before step t + 1 of any."""
        results: dict[int, list[Arrays | str]] = {correlation_id: [] for correlation_id in samples}
        with ThreadPoolExecutor(max_workers=min(8, len(samples))) as pool:
            for t in range(self.steps):
                running = [cid for cid in samples if not any(isinstance(r, str) for r in results[cid])]
                sent = pool.map(lambda cid, t=t: self.send(samples[cid], t, cid), running)
                for cid, result in zip(running, sent, strict=True):
                    results[cid].append(result)
        return results


def _judge(results: Mapping[int, list[Arrays | str]], samples: Mapping[int, int], reference: list[list[Arrays]],
           tols: Mapping[str, Tolerance]) -> tuple[Divergence | None, float]:
    """The earliest divergence over the sequences (by step, then by correlation id), or None; and the worst ratio
    to tolerance over every step served (infinite when a request failed)."""
    found, worst = [], 0.0
    for correlation_id, per_step in results.items():
        sample, first = samples[correlation_id], None
        for t, result in enumerate(per_step):
            if isinstance(result, str):
                first, worst = first or Divergence(correlation_id, sample, t, "", error=result), math.inf
                break
            for name, tol in tols.items():
                closeness = compare_close(result[name], reference[sample][t][name], tol)
                worst = max(worst, closeness.worst_ratio)
                if first is None and not closeness.ok:
                    first = Divergence(correlation_id, sample, t, name, closeness=closeness)
        if first is not None:
            found.append(first)
    return min(found, key=lambda d: (d.step, d.correlation_id), default=None), worst


def _check(name: str, divergence: Divergence | None, worst: float, ok: str,
           context: Callable[[Divergence], str]) -> Check:
    if divergence is None:
        return Check(name, passed=True, value=worst, limit=1.0, detail=ok)
    return Check(name, passed=False, value=worst, limit=1.0, detail=divergence.describe() + context(divergence))
