"""triton-probe benchmark, two parts, same server, same run:

1. the probe's own latency figures against a plain tritonclient loop. Target: the probe's p50 within 10% of the
   plain loop's (its own overhead is small). Rounds alternate between the two so that drift in the machine's
   load hits both alike.
2. the probe's wall time, whole (load the gated ONNX and the inputs, every check, default options), on the small
   MLP and on a wide one (64 MB of weights, where parsing and checking the ONNX costs something), against a
   running server and — `local` — starting its own tritonserver (as `skewgate probe` without --url does).

    .venv/bin/python benchmarks/probe_bench.py      (needs `make triton`)
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
WALL_ROUNDS = 5
WIDE = 4096  # hidden width of the wide model: a 4096 × 4096 FP32 weight, 64 MB


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


def make_wide(path: Path) -> Path:
    """relu(x @ W1) @ W2 @ W3: x [batch, 4] → y [batch, 3], W2 WIDE × WIDE."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.normal(size=shape) / np.sqrt(shape[0])).astype(np.float32), name=n)
               for n, shape in (("W1", (4, WIDE)), ("W2", (WIDE, WIDE)), ("W3", (WIDE, 3)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["s"]), helper.make_node("MatMul", ["s", "W3"], ["y"])], "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], initializer=weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def timed(call: object) -> float:
    started = time.perf_counter()
    call()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    from tests.probe.conftest import make_mlp

    from skewgate.common.recording import TrackingOptions
    from skewgate.common.triton.repository import write_repository
    from skewgate.common.triton.server import triton_server
    from skewgate.probe.run import ProbeOptions, run

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        models = {"mlp": make_mlp(tmp / "mlp.onnx"), "wide": make_wide(tmp / "wide.onnx")}
        x = np.random.default_rng(0).normal(size=(16, 4)).astype(np.float32)
        inputs = tmp / "inputs.npz"
        np.savez(inputs, x=x)
        for model, path in models.items():
            write_repository(path, tmp / "repo", name=model)
        options = ProbeOptions(concurrency_levels=(1,), requests_per_level=REQUESTS)
        defaults, untracked = ProbeOptions(), TrackingOptions()
        wall: dict[str, list[float]] = {}
        with triton_server(tmp / "repo", models=tuple(models)) as server:
            plain_loop(server.http_url, "mlp", x)  # warm-up
            plain, ours = [], []
            for _ in range(ROUNDS):
                plain.append(plain_loop(server.http_url, "mlp", x))
                verdict = run(url=server.http_url, model="mlp", onnx=models["mlp"], inputs=inputs, options=options,
                              tracking=untracked)
                ours.append(verdict.details["latency"][0]["p50_ms"])
            for model, path in models.items():
                run(url=server.http_url, model=model, onnx=path, inputs=inputs, options=defaults,
                    tracking=untracked)  # warm-up
                wall[model] = [timed(lambda m=model, p=path: run(url=server.http_url, model=m, onnx=p, inputs=inputs,
                                                                 options=defaults, tracking=untracked))
                               for _ in range(WALL_ROUNDS)]
        wall["wide, local"] = [timed(lambda: run(url="", model="wide", onnx=models["wide"], inputs=inputs,
                                                 options=defaults, tracking=untracked))
                               for _ in range(ROUNDS)]
    p_plain, p_ours = float(np.median(plain)), float(np.median(ours))
    print(f"p50 over {REQUESTS} sequential single-sample requests, median of {ROUNDS} alternating rounds")
    print(f"  plain tritonclient loop  {p_plain:.3f} ms   (rounds {', '.join(f'{v:.3f}' for v in plain)})")
    print(f"  skewgate probe           {p_ours:.3f} ms   (rounds {', '.join(f'{v:.3f}' for v in ours)})")
    print(f"  ratio probe/plain        {p_ours / p_plain:.3f}   (target ≤ 1.10)")
    print("probe wall time, default options (median; rounds)")
    for model, rounds in wall.items():
        print(f"  {model:<12} {np.median(rounds):.3f} s   ({', '.join(f'{v:.3f}' for v in rounds)})")


if __name__ == "__main__":
    main()
