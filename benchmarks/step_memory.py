"""Peak memory of each release-gate step on the demo's inputs: what the KFP resource requests are sized from.

Each step runs as its CLI (the same core and MLflow logging as the component) in a fresh process; the resident
memory of the whole process tree (the probe's tritonserver and its Python backend included, as a pod's cgroup
counts them) is sampled every 50 ms and its peak reported, with the wall time. One run; a second run varies by a
few MiB.

    .venv/bin/python benchmarks/step_memory.py [--workdir work/step-memory]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tree_rss_kib(pid: int) -> int:
    """Sum of VmRSS over `pid` and its descendants (0 for a process that is gone)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def measure(command: list[str]) -> tuple[float, float, int]:
    """(peak MiB of the process tree, seconds, exit code)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss_kib(process.pid))
        time.sleep(0.05)
    return peak / 1024, time.perf_counter() - started, process.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    from skewgate.demo.digits import train_and_save

    with tempfile.TemporaryDirectory(prefix="skewgate-step-memory-") as tmp:
        work = (args.workdir or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        data = train_and_save(work / "candidates", epochs=3)
        cli = [str(Path(sys.executable).with_name("skewgate"))]
        track = ["--tracking-uri", f"sqlite:///{work / 'mlflow.db'}", "--experiment", "digits-mem",
                 "--pipeline-run-id", "memory"]
        onnx, int8, verdicts = work / "model.onnx", work / "model.int8.onnx", work / "verdicts"
        verdicts.mkdir(exist_ok=True)
        steps = {
            "export": ["export", "--model", str(data.good), "--inputs", str(data.examples), "--out", str(onnx)],
            "calibrate": ["calibrate", "--onnx", str(onnx), "--calibration", str(data.calibration),
                          "--eval", str(data.examples), "--out", str(int8), "--plot", str(work / "h.png"),
                          "--html", str(work / "c.html")],
            "drift": ["drift", "--reference", str(data.reference), "--current", str(data.current),
                      "--model", str(onnx), "--heatmap", str(work / "d.png"), "--html", str(work / "d.html")],
            "parity": ["parity", "--torch", str(data.good), "--onnx", str(onnx), "--int8", str(int8),
                       "--inputs", str(data.examples), "--layerwise", "--plot", str(work / "p.png"),
                       "--html", str(work / "p.html")],
            "probe": ["probe", "--model", "digits-mem", "--onnx", str(onnx), "--inputs", str(data.examples)],
            "promote": ["promote", "--model-name", "digits-mem", "--onnx", str(onnx), "--verdicts", str(verdicts),
                        "--require", "export", "--experiment", "digits-mem"],
        }
        print(f"{'step':<10} {'peak MiB':>9} {'seconds':>8}  exit")
        for step, argv in steps.items():
            report = ["--report", str(verdicts / f"{step}.json")] if step != "promote" else []
            extra = track if step != "promote" else track[:2]
            peak, seconds, code = measure([*cli, *argv, *report, *extra])
            print(f"{step:<10} {peak:>9.0f} {seconds:>8.1f}  {code}", flush=True)
            if step == "export":
                # promote judges only export here; keep the other verdicts out of its folder
                (verdicts / "keep").mkdir(exist_ok=True)
            if step in {"calibrate", "drift", "parity", "probe"} and (verdicts / f"{step}.json").exists():
                (verdicts / f"{step}.json").rename(verdicts / "keep" / f"{step}.json")
        # the exit handler: connect to MLflow, read the verdicts, end the parent run
        finish = (f"from skewgate.common import mlflow_log as m; t = m.connect({track[1]!r}, "
                  "experiment='digits-mem'); m.finish_pipeline_run(t, 'memory', pipeline='release-gate')")
        peak, seconds, code = measure([sys.executable, "-c", finish])
        print(f"{'finish':<10} {peak:>9.0f} {seconds:>8.1f}  {code}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
