"""estimate benchmark: the nightly estimate at serving-log scale beside the work it cannot avoid.

    .venv/bin/python benchmarks/estimate_bench.py [--rows 250000,1000000,4000000] [--resamples 200]

A three-class model (tests/estimate/simulation.py) and its estimate profile, fit once on 20,000 labelled
reference rows; the current side is a Parquet file of 2 float32 feature columns at each `--rows`. Each run is a
fresh child process (peak RSS = its VmHWM): the estimate from the profile (what a night runs: `estimate(profile=…)`,
200 bootstrap calibrations each drawing a label per row), and side by side the floor — reading the same Parquet
file in the same batches and one ONNX Runtime run per batch. Prints rows per second, the ratio to the floor, and
peak memory, which should stay flat in the rows (one batch of `batch_rows` at a time).
Nothing here is a test: these machines are noisy, so figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from parity_bench import PEAK_MIB  # the VmHWM reader the benchmarks share  # noqa: E402

CHILD = PEAK_MIB + '''
import json, sys, time
from pathlib import Path
mode, onnx, profile, current = sys.argv[1:5]
started = time.perf_counter()
if mode == "estimate":
    from skewgate.estimate.core import EstimateOptions, estimate
    verdict = estimate(onnx=onnx, profile=profile, current=current, options=EstimateOptions(features=("a", "b")))
    figure = verdict.details["estimated_accuracy"]
else:  # the floor: read the file in the same batches, one ONNX Runtime run per batch
    import numpy as np, onnxruntime as ort, pyarrow.parquet as pq
    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    figure = 0
    for batch in pq.ParquetFile(current).iter_batches(batch_size=65536, columns=["a", "b"]):
        x = np.stack([batch.column(0).to_numpy(), batch.column(1).to_numpy()], axis=1).astype(np.float32)
        figure += int(session.run(None, {name: x})[0].argmax(axis=1).sum())
print(json.dumps({"seconds": time.perf_counter() - started, "peak_mib": peak_mib(), "figure": figure}))
'''


def _child(mode: str, onnx: Path, profile: Path, current: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode, str(onnx), str(profile), str(current)],
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tests.estimate import simulation as sim

    from skewgate.estimate.core import EstimateOptions, estimate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="250000,1000000,4000000")
    parser.add_argument("--resamples", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = sim.save_model(d / "three.onnx", sim.W3)
        x, labels = sim.three_class(rng, 20_000, sim.REFERENCE)
        np.savez(d / "reference.npz", x=x.astype(np.float32), labels=labels)
        estimate(onnx=model, reference=d / "reference.npz", current=d / "reference.npz",
                 options=EstimateOptions(resamples=args.resamples), profile_out=d / "estimate.profile")
        print(f"profile: {(d / 'estimate.profile').stat().st_size / 1024:.0f} KiB ({args.resamples} resamples)")
        print("| rows | estimate s | rows/s | floor s (read + ORT) | ratio | estimate peak MiB | floor peak MiB |")
        print("|---|---|---|---|---|---|---|")
        for rows in (int(r) for r in args.rows.split(",")):
            x, _ = sim.three_class(rng, rows, sim.INTO_THE_BOUNDARY)
            pq.write_table(pa.table({"a": x[:, 0].astype(np.float32), "b": x[:, 1].astype(np.float32)}),
                           d / "current.parquet", row_group_size=65_536)
            ours = _child("estimate", model, d / "estimate.profile", d / "current.parquet")
            floor = _child("floor", model, d / "estimate.profile", d / "current.parquet")
            print(f"| {rows:,} | {ours['seconds']:.1f} | {rows / ours['seconds']:,.0f} | {floor['seconds']:.2f} | "
                  f"{ours['seconds'] / floor['seconds']:.0f}× | {ours['peak_mib']:.0f} | {floor['peak_mib']:.0f} |",
                  flush=True)


if __name__ == "__main__":
    main()
