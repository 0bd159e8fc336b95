"""drift-gate benchmark: speed and memory at 100k × 512, the naive baseline side by side, statistical quality.

    .venv/bin/python benchmarks/drift_bench.py [--quick]

1. The whole gate (KS on every feature + MMD with its p-value) on reference 100k × 512 vs current 100k × 512
   float32, in a fresh subprocess: wall time and peak RSS (targets: ≤ 60 s, ≤ 2 GiB on 2 cores).
2. Side by side at 10k × 128 (the largest size the naive approach fits): a `scipy.stats.ks_2samp` loop over the
   columns plus a full RBF kernel matrix with the same number of permutations. Prints the speed ratio (target
   ≥ 20×) and how often the two verdicts agree over a few scenarios.
3. Statistical quality on synthetic data (64 features): false-positive rate under no drift (≥ 200 repetitions),
   power for a 0.2σ shift in 5 of 64 features, correlation-only, units bug, both.
Nothing here is a test: these machines are noisy, so figures are printed, not asserted.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from skewgate.common.verdict import Verdict
from skewgate.drift.core import DriftOptions, drift_gate

GIB = 1 << 30


def _save(path: Path, x: np.ndarray) -> Path:
    np.savez(path, x=x.astype(np.float32))
    return path


def whole_gate_in_subprocess(rows: int, dim: int, tmp: Path) -> tuple[float, float, str]:
    rng = np.random.default_rng(0)
    ref = _save(tmp / "ref.npz", rng.standard_normal((rows, dim), dtype=np.float32))
    cur = _save(tmp / "cur.npz", rng.standard_normal((rows, dim), dtype=np.float32))
    code = ("import time,sys; from skewgate.drift.core import drift_gate; t=time.perf_counter(); "
            f"r=drift_gate(reference='{ref}', current='{cur}'); "
            "print(time.perf_counter()-t, r.verdict.status)")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return float(out[0]), max(peak_kib, before) * 1024 / GIB, out[1]


def naive_gate(ref: np.ndarray, cur: np.ndarray, *, permutations: int, alpha: float = 0.05,
               seed: int = 0) -> str:
    """The approach the issue names as the baseline: a ks_2samp loop and a full kernel matrix."""
    from scipy.stats import ks_2samp

    pvalues = np.array([ks_2samp(ref[:, j], cur[:, j]).pvalue for j in range(ref.shape[1])])
    ks_flag = bool((np.minimum(1, pvalues * len(pvalues)) < alpha).any())  # Bonferroni
    pooled = np.concatenate([ref, cur]).astype(np.float32)
    mean, std = ref.mean(axis=0), ref.std(axis=0)
    pooled = (pooled - mean) / np.where(std > 0, std, 1)
    sq = np.sum(pooled**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * pooled @ pooled.T, 0)
    bandwidth = float(np.sqrt(np.median(d2[:1000, :1000])))
    kernel = np.exp(-d2 / (2 * bandwidth**2))
    del d2
    n, m = len(ref), len(cur)
    base = np.concatenate([np.full(n, 1 / n), np.full(m, -1 / m)]).astype(np.float32)
    rng = np.random.default_rng(seed)
    stats = [float(base @ kernel @ base)]
    for _ in range(permutations):
        s = base[rng.permutation(n + m)]
        stats.append(float(s @ (kernel @ s)))
    p = (np.sum(np.array(stats[1:]) >= stats[0]) + 1) / (permutations + 1)
    mmd_flag = p < alpha
    return "fail" if ks_flag and mmd_flag else "warn" if ks_flag or mmd_flag else "pass"


def synthetic(kind: str, n: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    ref, cur = rng.standard_normal((n, d)), rng.standard_normal((n, d))
    if kind in {"shift 0.2σ in 5/64", "both"}:
        cur[:, :5] += 0.2
    if kind in {"correlation only", "both"}:
        for j in range(10, 26, 2):  # 8 pairs of features become correlated; every marginal stays N(0, 1)
            cur[:, j + 1] = 0.9 * cur[:, j] + np.sqrt(1 - 0.81) * cur[:, j + 1]
    if kind == "units bug (1 feature ×100)":
        cur[:, 7] *= 100.0
    return ref.astype(np.float32), cur.astype(np.float32)


def gate(ref: np.ndarray, cur: np.ndarray, tmp: Path, seed: int) -> str:
    return gate_verdict(ref, cur, tmp, seed).status


def gate_verdict(ref: np.ndarray, cur: np.ndarray, tmp: Path, seed: int) -> Verdict:
    return drift_gate(reference=_save(tmp / "r.npz", ref), current=_save(tmp / "c.npz", cur),
                      options=DriftOptions(seed=seed)).verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    args = parser.parse_args()
    big, naive_rows, reps = ((20_000, 5_000, 40) if args.quick else (100_000, 10_000, 200))
    import scipy.stats  # noqa: F401  (imported before any timing: neither side pays the import)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        print(f"1. whole gate, {big:,} × 512 vs {big:,} × 512 float32 (fresh subprocess)", flush=True)
        seconds, peak, status = whole_gate_in_subprocess(big, 512, tmp)
        print(f"   {seconds:.1f} s (target ≤ 60), peak RSS {peak:.2f} GiB (target ≤ 2), verdict {status}\n")

        print(f"2. side by side at {naive_rows:,} × 128, 200 permutations each", flush=True)
        rng = np.random.default_rng(1)
        ref, cur = synthetic("none", naive_rows, 128, rng)
        started = time.perf_counter()
        ours = gate(ref, cur, tmp, seed=0)
        t_ours = time.perf_counter() - started
        started = time.perf_counter()
        theirs = naive_gate(ref, cur, permutations=200)
        t_naive = time.perf_counter() - started
        print(f"   skewgate {t_ours:.2f} s ({ours}), naive {t_naive:.2f} s ({theirs}): "
              f"speed ratio {t_naive / t_ours:.1f}× (target ≥ 20×)")
        agree, total = 0, 0
        for kind in ("none", "shift 0.2σ in 5/64", "correlation only", "both"):
            for seed in range(2):
                ref, cur = synthetic(kind, 2_000, 64, np.random.default_rng(100 + seed))
                a, b = gate(ref, cur, tmp, seed), naive_gate(ref, cur, permutations=200, seed=seed)
                agree, total = agree + (a == b), total + 1
                print(f"     {kind:<28} skewgate {a:<5} naive {b}")
        print(f"   verdicts agree in {agree}/{total} cases\n")

        print("3. statistical quality, 64 features, 1,000 rows each side, α = 0.05 (KS, BH) and 0.05 (MMD)")
        print(f"   {'scenario':<28} {'expected':<9} {'reps':>5}  pass  warn  fail   KS flags       MMD flags")
        plan = [("none", "pass", reps), ("shift 0.2σ in 5/64", "warn/fail", reps // 2),
                ("correlation only", "warn", reps // 4), ("units bug (1 feature ×100)", "warn", reps // 4),
                ("both", "fail", reps // 4)]
        for kind, expected, count in plan:
            rng = np.random.default_rng(hash(kind) % 2**32)
            verdicts = [gate_verdict(*synthetic(kind, 1_000, 64, rng), tmp, seed=i) for i in range(count)]
            seen = Counter(v.status for v in verdicts)
            rates = [_rate([not _check(v, name).passed for v in verdicts]) for name in ("ks_drift", "mmd_drift")]
            print(f"   {kind:<28} {expected:<9} {count:>5}  {seen['pass']:>4}  {seen['warn']:>4}  {seen['fail']:>4}"
                  f"   {rates[0]}   {rates[1]}", flush=True)


def _check(verdict: Verdict, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in verdict.checks if c.name == name)


def _rate(flags: list[bool]) -> str:
    """Share with its Monte Carlo standard error."""
    share = sum(flags) / len(flags)
    return f"{share:.3f} ± {np.sqrt(max(share * (1 - share), 1e-12) / len(flags)):.3f}"


if __name__ == "__main__":
    main()
