"""parity-diff benchmark: layerwise parity of a ResNet-style model (≥ 20 convs) over 256 samples.

    .venv/bin/python benchmarks/parity_bench.py

Targets, side by side in one run: total time ≤ 4× (one PyTorch forward + one ORT forward over the same batches);
peak RSS within 1.5× of plain inference (each measured in a fresh subprocess). Time is compared like for like:
both whole runs (each loads its models: the first `torch.export.load` in a process costs about a second), and
the batches alone (parity's streaming vs the two forwards); the mixed ratio is printed too. Beside it,
`torch.onnx.verification.verify_onnx_program(..., compare_intermediates=True)` on the same model: the speed ratio
and whether both name the same worst layer (largest max |error|).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SAMPLES, BATCH = 256, 32

MODEL = '''
import torch
from torch import nn

class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return torch.relu(self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))) + self.down(x))

class ResNetish(nn.Module):
    """stem + 4 stages × 2 basic blocks: 1 + 16 + 3 downsample = 20 convs."""
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        chans, layers, cin = [16, 32, 64, 128], [], 16
        for i, c in enumerate(chans):
            layers += [Basic(cin, c, 1 if i == 0 else 2), Basic(c, c, 1)]
            cin = c
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)).mean((2, 3)))
'''

# Shared by the benchmarks' child scripts: VmHWM is the peak of the process's own memory (ru_maxrss carries the
# forking parent's peak across exec).
PEAK_MIB = '''
def peak_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
'''

CHILD = PEAK_MIB + '''
import json, sys, time
import numpy as np
mode, pt2, onnx_path, inputs = sys.argv[1:5]
started = time.perf_counter()
if mode == "plain":
    import torch, onnxruntime as ort
    started = time.perf_counter()  # from here: load both models, run both forwards
    program = torch.export.load(pt2).module()
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    x = np.load(inputs)["x"]
    loaded = time.perf_counter()
    print(json.dumps({"load_s": loaded - started}))
    with torch.no_grad():
        for i in range(0, len(x), {batch}):
            program(torch.from_numpy(x[i:i + {batch}]))
            session.run(None, {"x": x[i:i + {batch}]})
else:
    import onnx, onnxruntime, torch  # imported before the clock, as the plain run does
    from skewgate.parity.core import ParityOptions, parity, worst_layer
    started = time.perf_counter()  # from here: load both models, compare, report
    result = parity(torch_model=pt2, onnx=onnx_path, inputs=inputs,
                    options=ParityOptions(layerwise=True, batch_size={batch}, max_samples={samples}))
    print(json.dumps({"worst": worst_layer(result.layers["torch_vs_fp32"]), "status": result.verdict.status,
                      "matched": result.verdict.details["torch_vs_fp32"]["coverage"]["matched"],
                      **result.verdict.details["timing"]}))
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_gib": peak_mib() / 1024}))
'''.replace("{batch}", str(BATCH)).replace("{samples}", str(SAMPLES))


def child(mode: str, *paths: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode, *map(str, paths)], check=True, capture_output=True,
                         text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    import numpy as np
    import torch

    namespace: dict = {}
    exec(MODEL, namespace)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        torch.manual_seed(0)
        model = namespace["ResNetish"]().train()
        with torch.no_grad():
            model(torch.randn(64, 3, 32, 32))
        model.eval()
        x = np.random.default_rng(0).normal(size=(SAMPLES, 3, 32, 32)).astype(np.float32)
        np.savez(tmp / "x.npz", x=x)
        dim = {"x": {0: torch.export.Dim("batch", min=1, max=1024)}}
        program = torch.export.export(model, (torch.from_numpy(x[:4]),), dynamic_shapes=dim)
        torch.export.save(program, str(tmp / "m.pt2"))
        convs = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
        onnx_program = torch.onnx.export(program, (torch.from_numpy(x[:4]),), dynamo=True, verbose=False)
        onnx_program.save(str(tmp / "m.onnx"))

        plain_info, plain = child("plain", tmp / "m.pt2", tmp / "m.onnx", tmp / "x.npz")
        forwards = plain["seconds"] - plain_info["load_s"]
        ours_info, ours = child("parity", tmp / "m.pt2", tmp / "m.onnx", tmp / "x.npz")

        from torch.onnx.verification import verify_onnx_program

        started = time.perf_counter()
        infos = []
        for i in range(0, SAMPLES, BATCH):
            infos.append(verify_onnx_program(onnx_program, (torch.from_numpy(x[i:i + BATCH]),),
                                             compare_intermediates=True))
        t_theirs = time.perf_counter() - started
        worst_theirs: dict[str, float] = {}
        for batch in infos:
            for info in batch:
                worst_theirs[info.name] = max(worst_theirs.get(info.name, 0.0), float(info.max_abs_diff))
        theirs_worst = max((n for n in worst_theirs if n != "linear"), key=worst_theirs.get)

    print(f"ResNet-style model, {convs} convs, {SAMPLES} samples in batches of {BATCH}, "
          f"{ours_info['matched']} intermediate values matched")
    print(f"  plain inference (torch fwd + ORT fwd)   {plain['seconds']:.2f} s (of which loading both models "
          f"{plain_info['load_s']:.2f} s, forwards {forwards:.2f} s)   peak RSS {plain['peak_gib']:.2f} GiB")
    print(f"  skewgate parity --layerwise             {ours['seconds']:.2f} s (of which loading and setup "
          f"{ours_info['setup_s']:.2f} s, streaming {ours_info['streaming_s']:.2f} s)   "
          f"peak RSS {ours['peak_gib']:.2f} GiB")
    print("  time ratio, like for like (target ≤ 4):")
    print(f"    whole run, both loading their models   {ours['seconds'] / plain['seconds']:.2f}×")
    print(f"    batches only (streaming vs forwards)   {ours_info['streaming_s'] / forwards:.2f}×")
    print(f"    (parity's whole run vs the forwards alone: {ours['seconds'] / forwards:.2f}× — the first "
          "torch.export.load in a process costs ~1 s, which plain inference pays too, outside that clock)")
    print(f"  memory ratio {ours['peak_gib'] / plain['peak_gib']:.2f}× (target ≤ 1.5)")
    print(f"  verify_onnx_program(compare_intermediates=True), same batches: {t_theirs:.2f} s → skewgate is "
          f"{t_theirs / ours['seconds']:.1f}× faster")
    print(f"  worst layer: skewgate {ours_info['worst']!r}, verify_onnx_program {theirs_worst!r} → "
          f"{'same' if ours_info['worst'] == theirs_worst else 'different'}")


if __name__ == "__main__":
    main()
