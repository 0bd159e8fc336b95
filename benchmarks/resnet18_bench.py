"""export, calibrate and parity on torchvision's resnet18 at 224×224, beside plain inference of the same batch.

    .venv/bin/python benchmarks/resnet18_bench.py

A model people ship (random init: nothing is downloaded), 32 evaluation samples, in one process: the wall time of
skewgate's export (the dynamo exporter, then outputs, batch invariance with every sample alone, determinism),
calibrate (ranges, quantisation, the deployed evaluation, the budget loop) and parity (`layerwise`, FP32 and the
INT8 file calibrate wrote), each beside one warm PyTorch forward and one warm ONNX Runtime forward of the same
32 samples, as ratios. Reported in docs/benchmarks.md (issue 21).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from export_bench import SIZE, resnet18  # benchmarks/ is the script's folder: first on sys.path

SAMPLES = 32


def main() -> None:
    import onnxruntime as ort

    from skewgate.calibrate.core import CalibrateOptions, calibrate
    from skewgate.export.core import export_model
    from skewgate.parity.core import ParityOptions, parity

    model, x = resnet18(SAMPLES)
    with torch.no_grad():
        model(torch.from_numpy(x))  # warm
        started = time.perf_counter()
        logits = model(torch.from_numpy(x)).numpy()
        torch_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        batch = torch.export.Dim("batch", min=1, max=1024)
        program = torch.export.export(model, (torch.from_numpy(x[:2]),), dynamic_shapes={"x": {0: batch}})
        torch.export.save(program, str(work / "resnet18.pt2"))
        np.savez(work / "eval.npz", x=x, labels=logits.argmax(-1))
        timings = {}
        started = time.perf_counter()
        exported = export_model(model=work / "resnet18.pt2", inputs=work / "eval.npz", out=work / "resnet18.onnx")
        timings["export"] = (time.perf_counter() - started, exported.status)
        session = ort.InferenceSession(str(work / "resnet18.onnx"), providers=["CPUExecutionProvider"])
        session.run(None, {"x": x})  # warm
        started = time.perf_counter()
        session.run(None, {"x": x})
        ort_s = time.perf_counter() - started
        started = time.perf_counter()
        calibrated = calibrate(onnx=work / "resnet18.onnx", calibration=work / "eval.npz",
                               eval_data=work / "eval.npz", out=work / "resnet18.int8.onnx",
                               options=CalibrateOptions())
        timings["calibrate"] = (time.perf_counter() - started, calibrated.verdict.status)
        started = time.perf_counter()
        compared = parity(torch_model=work / "resnet18.pt2", onnx=work / "resnet18.onnx", inputs=work / "eval.npz",
                          int8=work / "resnet18.int8.onnx", options=ParityOptions(layerwise=True))
        timings["parity --layerwise (FP32 + INT8)"] = (time.perf_counter() - started, compared.verdict.status)
    pair = torch_s + ort_s
    print(f"torchvision resnet18, {SAMPLES} samples at {SIZE}×{SIZE}, one process, torch {torch.__version__}, "
          f"onnxruntime {ort.__version__}")
    print(f"  one PyTorch forward {torch_s:.2f} s, one ONNX Runtime forward {ort_s:.2f} s (warm)")
    for step, (seconds, status) in timings.items():
        print(f"  {step:<34} {seconds:7.2f} s  {seconds / torch_s:6.1f}× torch  {seconds / pair:6.1f}× the pair  "
              f"verdict {status}")


if __name__ == "__main__":
    main()
