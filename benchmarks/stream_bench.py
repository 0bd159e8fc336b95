"""Stream-mode benchmark: `parity`'s stream checks (`parity/internals/stream.py`) on a GRU classifier over 64
sequences × 128 steps, beside the same number of plain ONNX Runtime step calls, side by side in one run.

    .venv/bin/python benchmarks/stream_bench.py [--repeat 5]

Target (issue 37): stream mode costs ≤ 1.3× the same number of plain ORT step calls. Stream mode is every stream
check as parity runs it, warm: loading STEP and its session, the drives (matches_batch, reset, the carried state),
the state perturbations, every per-step comparison and the details. FULL's outputs are given, as parity gives them:
its own pass over the inputs (for `outputs_match`) computed them, and stream mode does not run FULL again (the FULL
run is printed for the record). Plain is what a user writes to serve the model: `session.run` per step on the whole
batch with the state fed back, nothing else (ONNX Runtime's default options), as many calls as stream mode makes
(counted by a thin wrapper around STEP's session that also times them). Each side runs `--repeat` times,
alternating, and the median is used: this machine is shared. It also prints, for the record and not as the target,
one plain pass (128 calls) beside stream mode: the whole mode is three passes (the sequences, the second sequence
reset, and carried on) and the comparisons.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import tempfile
import time
from pathlib import Path

SEQUENCES, STEPS, FEATURES, HIDDEN, CLASSES = 64, 128, 16, 64, 10


def _models(tmp: Path) -> tuple[Path, Path]:
    """FULL (the GRU unrolled over 128 steps, logits per step) and STEP (one step, `h` in, `h_next` out)."""
    import torch
    from torch import nn

    class Gru(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wi, self.wh = nn.Linear(FEATURES, 3 * HIDDEN), nn.Linear(HIDDEN, 3 * HIDDEN)
            self.head = nn.Linear(HIDDEN, CLASSES)

        def cell(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
            ir, iz, in_ = self.wi(x).chunk(3, dim=-1)
            hr, hz, hn = self.wh(h).chunk(3, dim=-1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            return (1 - z) * torch.tanh(in_ + r * hn) + z * h

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h, logits = x.new_zeros(x.shape[0], HIDDEN), []
            for t in range(x.shape[1]):
                h = self.cell(x[:, t], h)
                logits.append(self.head(h))
            return torch.stack(logits, dim=1)

    class Step(nn.Module):
        def __init__(self, full: Gru) -> None:
            super().__init__()
            self.full = full

        def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            h_next = self.full.cell(x, h)
            return self.full.head(h_next), h_next

    torch.manual_seed(0)
    full = Gru().eval()
    paths = []
    for module, args, names, outputs, name in (
            (full, (torch.randn(2, STEPS, FEATURES),), ["x"], ["logits"], "full.onnx"),
            (Step(full), (torch.randn(2, FEATURES), torch.zeros(2, HIDDEN)), ["x", "h"], ["logits", "h_next"],
             "step.onnx")):
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(module, args, dynamic_shapes=tuple({0: batch} for _ in args))
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(program, args, dynamo=True, verbose=False, input_names=names,
                              output_names=outputs).save(str(tmp / name))
        paths.append(tmp / name)
    return paths[0], paths[1]


def main() -> None:
    import numpy as np
    import onnxruntime as ort

    from skewgate.common.io import load_onnx
    from skewgate.common.runtime import run_by_name, session
    from skewgate.parity.internals import stream

    cli = argparse.ArgumentParser()
    cli.add_argument("--repeat", type=int, default=5)
    args = cli.parse_args()
    with tempfile.TemporaryDirectory() as name:
        full_path, step_path = _models(Path(name))
        x = np.random.default_rng(0).normal(size=(SEQUENCES, STEPS, FEATURES)).astype(np.float32)
        full_session = session(load_onnx(full_path))
        full_values = run_by_name(full_session, {"x": x})  # parity's own pass over the inputs

        def stream_mode() -> tuple[list, dict]:
            return stream.stream_checks(step_onnx=step_path, states={"h": "h_next"}, feeds={"x": x},
                                        full=full_values, full_outputs=["logits"], tolerances={},
                                        full_onnx=full_path)

        counted = [0, 0.0]  # STEP calls stream mode makes, and the seconds spent inside them

        class Counted:
            """STEP's session as stream mode builds it, its `run` counted and timed."""

            def __init__(self, inner: object) -> None:
                self.inner = inner

            def __getattr__(self, name: str) -> object:
                return getattr(self.inner, name)

            def run(self, names: object, feeds: dict) -> list:
                started = time.perf_counter()
                try:
                    return self.inner.run(names, feeds)
                finally:
                    counted[0] += 1
                    counted[1] += time.perf_counter() - started

        original = stream.session
        stream.session = lambda model, **options: Counted(original(model, **options))  # type: ignore[assignment]
        checks, _ = stream_mode()
        calls = int(counted[0])

        # plain: the step model as a user serves it (ORT defaults), state fed back, nothing else
        plain_session = ort.InferenceSession(str(step_path), providers=["CPUExecutionProvider"])

        def plain(n_calls: int) -> None:
            h = np.zeros((SEQUENCES, HIDDEN), np.float32)
            for i in range(n_calls):
                _, h = plain_session.run(None, {"x": x[:, i % STEPS], "h": h})

        plain(STEPS)  # warm both
        stream_mode()
        ours, theirs, one_pass, full_runs, inside = [], [], [], [], []
        for _ in range(args.repeat):  # alternate, so both sides see the same spells of load
            started = time.perf_counter()
            plain(calls)
            theirs.append(time.perf_counter() - started)
            counted[1] = 0.0
            started = time.perf_counter()
            stream_mode()
            ours.append(time.perf_counter() - started)
            inside.append(counted[1] / ours[-1])
            started = time.perf_counter()
            plain(STEPS)
            one_pass.append(time.perf_counter() - started)
            started = time.perf_counter()
            run_by_name(full_session, {"x": x})
            full_runs.append(time.perf_counter() - started)

    mine, plain_s, single = statistics.median(ours), statistics.median(theirs), statistics.median(one_pass)
    status = ", ".join(f"{c.name} {'pass' if c.passed else 'FAIL'}" for c in checks)
    print(f"GRU (features {FEATURES}, hidden {HIDDEN}), {SEQUENCES} sequences × {STEPS} steps; {status}; median of "
          f"{args.repeat} alternating runs")
    print(f"  stream mode (every stream check, warm)       {mine * 1e3:8.1f} ms   ({calls} STEP calls)")
    print(f"  plain ORT: {calls} step calls, state fed back  {plain_s * 1e3:8.1f} ms")
    print(f"  ratio {mine / plain_s:.2f}× (target ≤ 1.3)")
    print(f"  stream mode's time inside STEP's session.run: {statistics.median(inside):.0%} (the rest: its own "
          "work — loading STEP, the per-step bookkeeping, the comparisons)")
    print(f"  for the record: one plain pass ({STEPS} calls) {single * 1e3:.1f} ms, stream mode is "
          f"{mine / single:.2f}× that (three passes and the comparisons); FULL's run on the sequences, which parity "
          f"makes anyway, {statistics.median(full_runs) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
