"""triton-probe benchmark: the probe's own latency figures against a plain tritonclient loop, same server, same run.

    .venv/bin/python benchmarks/probe_bench.py      (needs `make triton`)

Target: the probe's p50 within 10% of the plain loop's (its own overhead is small). Rounds alternate between the
two so that drift in the machine's load hits both alike.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.probe.conftest builds the model

REQUESTS = 300
ROUNDS = 3


def plain_loop(url: str, model: str, x: np.ndarray) -> float:
    import tritonclient.http as http

    client = http.InferenceServerClient(url)
    samples = []
    for i in range(REQUESTS):
        tensor = http.InferInput("x", [1, *x.shape[1:]], "FP32")
        tensor.set_data_from_numpy(x[i % len(x)][None])
        started = time.perf_counter()
        client.infer(model, [tensor], outputs=[http.InferRequestedOutput("y")])
        samples.append((time.perf_counter() - started) * 1000)
    client.close()
    return float(np.percentile(samples, 50))


def main() -> None:
    from tests.probe.conftest import make_mlp

    from skewgate.common.triton.repository import write_repository
    from skewgate.common.triton.server import triton_server
    from skewgate.probe.core import ProbeOptions, probe

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        onnx_path = make_mlp(tmp / "mlp.onnx")
        x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        np.savez(tmp / "inputs.npz", x=x)
        write_repository(onnx_path, tmp / "repo", name="mlp")
        options = ProbeOptions(concurrency_levels=(1,), requests_per_level=REQUESTS)
        with triton_server(tmp / "repo", models=("mlp",)) as server:
            plain_loop(server.http_url, "mlp", x)  # warm-up
            plain, ours = [], []
            for _ in range(ROUNDS):
                plain.append(plain_loop(server.http_url, "mlp", x))
                verdict = probe(url=server.http_url, model="mlp", onnx=onnx_path, inputs=tmp / "inputs.npz",
                                options=options)
                ours.append(verdict.details["latency"][0]["p50_ms"])
    p_plain, p_ours = float(np.median(plain)), float(np.median(ours))
    print(f"p50 over {REQUESTS} sequential single-sample requests, median of {ROUNDS} alternating rounds")
    print(f"  plain tritonclient loop  {p_plain:.3f} ms   (rounds {', '.join(f'{v:.3f}' for v in plain)})")
    print(f"  skewgate probe           {p_ours:.3f} ms   (rounds {', '.join(f'{v:.3f}' for v in ours)})")
    print(f"  ratio probe/plain        {p_ours / p_plain:.3f}   (target ≤ 1.10)")


if __name__ == "__main__":
    main()
