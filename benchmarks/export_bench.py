"""export benchmark: the whole `skewgate export` process on torchvision's resnet18 at 224×224 with 32 samples,
beside the export a user writes by hand, each a fresh process, side by side in one run.

    .venv/bin/python benchmarks/export_bench.py [--repeat 3] [--samples 32]

The baseline (issue 37) is the least a careful user runs to trust an export: load the program,
`torch.onnx.export(dynamo=True)`, one ONNX Runtime run and one PyTorch run of the same samples, one comparison
(`np.testing.assert_allclose`) — a whole process, interpreter start and imports included. skewgate's export also
lints the program, grounds its tolerances in a float64 run, checks batch invariance (every sample alone, an odd
size, the largest) and determinism on both runtimes, and hashes every fed tensor. Target: ≤ 1.5× the baseline.
Each side runs `--repeat` times, alternating (this machine is shared; load comes and goes); medians are compared.
The model is random-init (nothing is downloaded) with BatchNorm statistics from one batch.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIZE = 224

BASELINE = '''
import sys
import numpy as np, onnxruntime as ort, torch
program = torch.export.load(sys.argv[1])
x = np.load(sys.argv[2])["x"]
torch.onnx.export(program, (torch.from_numpy(x[:2]),), sys.argv[3], dynamo=True,
                  dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
session = ort.InferenceSession(sys.argv[3], providers=["CPUExecutionProvider"])
ours = session.run(None, {"x": x})[0]
with torch.no_grad():
    theirs = program.module()(torch.from_numpy(x)).numpy()
np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4)
'''


def resnet18(samples: int) -> tuple[Any, np.ndarray]:
    """torchvision's resnet18 in eval mode, random init with BatchNorm statistics from one batch (untouched ones
    fail export's lint), and that batch: `samples` inputs at 224×224 (also benchmarks/resnet18_bench.py's)."""
    import torch

    sys.path.insert(0, str(ROOT))  # the tests' library zoo builds the model
    from tests.library_zoo import torchvision_models

    torch.manual_seed(0)
    model = torchvision_models().resnet18().train()
    x = np.random.default_rng(0).normal(size=(samples, 3, SIZE, SIZE)).astype(np.float32)
    with torch.no_grad():
        model(torch.from_numpy(x))
    return model.eval(), x


def build(work: Path, samples: int) -> tuple[Path, Path]:
    """resnet18's program (dynamic batch) and `samples` inputs at 224×224, in `work`."""
    import torch

    model, x = resnet18(samples)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, (torch.from_numpy(x[:2]),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, str(work / "resnet18.pt2"))
    np.savez(work / "eval.npz", x=x)
    return work / "resnet18.pt2", work / "eval.npz"


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[:3]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--samples", type=int, default=32)
    args = parser.parse_args()
    skewgate = str(Path(sys.executable).with_name("skewgate"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program, inputs = build(work, args.samples)
        script = work / "baseline.py"
        script.write_text(BASELINE)
        ours, theirs = [], []
        for _ in range(args.repeat):
            theirs.append(timed([sys.executable, str(script), str(program), str(inputs), str(work / "plain.onnx")]))
            ours.append(timed([skewgate, "export", "--model", str(program), "--inputs", str(inputs),
                               "--out", str(work / "model.onnx"), "--max-samples", str(args.samples)]))
    base, whole = statistics.median(theirs), statistics.median(ours)
    print(f"torchvision resnet18, {args.samples} samples at {SIZE}×{SIZE}, whole processes, median of "
          f"{args.repeat} alternating runs")
    print(f"  baseline: torch.onnx.export(dynamo=True) + one ORT run + one torch run + one comparison "
          f"{base:6.2f} s  (runs: {', '.join(f'{s:.2f}' for s in theirs)})")
    print(f"  whole `skewgate export` process                                              "
          f"{whole:6.2f} s  (runs: {', '.join(f'{s:.2f}' for s in ours)})")
    print(f"  time ratio {whole / base:.2f}× (target ≤ 1.5)")


if __name__ == "__main__":
    main()
