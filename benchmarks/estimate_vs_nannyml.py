"""estimate beside NannyML's CBPE on the same scores: how close each comes to what the labels realise.

    python3.11 -m venv /tmp/nannyml && /tmp/nannyml/bin/pip install nannyml statsmodels
    .venv/bin/python benchmarks/estimate_vs_nannyml.py --nannyml-python /tmp/nannyml/bin/python [--seeds 20]

NannyML pins packages the project does not (FLAML, LightGBM, plotly <6, …), so it runs in a virtual environment of
its own, in a child process, on the scores this one wrote. Per seed: the binary model of tests/estimate/
simulation.py (P(y=1|x) = sigmoid(3·x₀), the model miscalibrated at 1.5·x₀ + 0.3), a labelled reference of 4,000
rows and current sets of 4,000 (boundary: accuracy falls; ignored: a shift the model does not read; wide: x₀
spread twice the reference's; mild: 1,000 rows spread 1.0). skewgate estimates through ONNX Runtime; NannyML's
CBPE (`problem_type="classification_binary"`, one chunk per period, its own isotonic calibration) gets the same
model's probabilities. Printed: per scenario the mean absolute error of each estimate against the realised
accuracy, the mean estimate gap between the two, and how often each interval covered the realised accuracy
(NannyML's is its sampling-error band, ±3 standard errors by default). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCENARIOS = {"boundary": (4000, 0.4), "ignored": (4000, 1.5), "wide": (4000, 3.0), "mild": (1000, 1.0)}

NANNYML = '''
import json, sys
import numpy as np, pandas as pd, nannyml as nml
rows = []
data = np.load(sys.argv[1])
for key in sorted(k for k in data.files if k.endswith("/reference_p")):
    seed = key.split("/")[0]
    def frame(side):
        p = data[f"{seed}/{side}_p"]
        out = {"p": p, "pred": (p >= 0.5).astype(int)}
        if side == "reference":
            out["y"] = data[f"{seed}/reference_y"]
        return pd.DataFrame(out)
    estimator = nml.CBPE(y_pred_proba="p", y_pred="pred", y_true="y", problem_type="classification_binary",
                         metrics=["accuracy"], chunk_number=1)
    estimator.fit(frame("reference"))
    for name in json.loads(sys.argv[2]):
        table = estimator.estimate(frame(name)).filter(period="analysis").to_df()
        rows.append({"seed": seed, "scenario": name, "value": float(table[("accuracy", "value")].iloc[0]),
                     "low": float(table[("accuracy", "lower_confidence_boundary")].iloc[0]),
                     "high": float(table[("accuracy", "upper_confidence_boundary")].iloc[0])})
print(json.dumps(rows))
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nannyml-python", required=True, help="python of a virtual environment with nannyml")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()

    from tests.estimate import simulation as sim

    from skewgate.estimate.core import EstimateOptions, estimate

    ours: dict[tuple[str, str], dict[str, float]] = {}
    arrays: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        model = sim.binary_model(d / "binary.onnx")
        for seed in range(args.seeds):
            rng = np.random.default_rng(1000 + seed)
            x, logits, labels = sim.binary(rng, 4000, sim.REFERENCE)
            np.savez(d / "reference.npz", x=x, labels=labels)
            arrays[f"{seed}/reference_p"], arrays[f"{seed}/reference_y"] = _p(logits), labels
            for name, (n, spread) in SCENARIOS.items():
                shift = replace(sim.REFERENCE, spread=spread, offset=3.0 if name == "ignored" else 0.0)
                x, logits, labels = sim.binary(rng, n, shift)
                np.savez(d / f"{name}.npz", x=x)
                np.save(d / f"{name}.npy", labels)
                arrays[f"{seed}/{name}_p"] = _p(logits)
                verdict = estimate(onnx=model, reference=d / "reference.npz", current=d / f"{name}.npz",
                                   current_labels=d / f"{name}.npy", options=EstimateOptions())
                row = verdict.details["table"][0]
                ours[(str(seed), name)] = {"value": row["estimated"], "low": row["low"], "high": row["high"],
                                           "realised": row["realised"]}
            print(f"seed {seed + 1}/{args.seeds}", file=sys.stderr)
        np.savez(d / "scores.npz", **arrays)
        done = subprocess.run([args.nannyml_python, "-c", NANNYML, str(d / "scores.npz"), json.dumps(list(SCENARIOS))],
                              check=True, capture_output=True, text=True)
    theirs = {(r["seed"], r["scenario"]): r for r in json.loads(done.stdout.strip().splitlines()[-1])}
    print(f"{'scenario':<10} {'realised':>9} {'skewgate MAE':>13} {'NannyML MAE':>12} {'|gap|':>7} "
          f"{'skewgate covers':>16} {'NannyML covers':>15}")
    for name in SCENARIOS:
        keys = [(str(s), name) for s in range(args.seeds)]
        realised = np.array([ours[k]["realised"] for k in keys])
        mine = np.array([ours[k]["value"] for k in keys])
        nanny = np.array([theirs[k]["value"] for k in keys])
        cover_mine = np.mean([ours[k]["low"] <= ours[k]["realised"] <= ours[k]["high"] for k in keys])
        cover_nanny = np.mean([theirs[k]["low"] <= ours[k]["realised"] <= theirs[k]["high"] for k in keys])
        print(f"{name:<10} {realised.mean():>9.4f} {np.abs(mine - realised).mean():>13.4f} "
              f"{np.abs(nanny - realised).mean():>12.4f} {np.abs(mine - nanny).mean():>7.4f} "
              f"{cover_mine:>16.0%} {cover_nanny:>15.0%}")
    return 0


def _p(logits: np.ndarray) -> np.ndarray:
    """The model's probability of class 1 (softmax of its two logits), as NannyML is handed it."""
    return 1 / (1 + np.exp(-(logits[:, 1] - logits[:, 0])))


if __name__ == "__main__":
    raise SystemExit(main())
