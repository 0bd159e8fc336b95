"""drift-gate benchmark: serving-log scale against the floor, 100k × 512, the naive baseline side by side,
statistical quality.

    .venv/bin/python benchmarks/drift_bench.py [--quick] [--only scale]

0. Serving-log scale: Parquet files of 4 float64 features, reference and current of the same distribution, at
   2M and 8M rows per side. Each run in a fresh child process (peak RSS = its VmHWM), side by side with the floor
   (pyarrow reading both files whole + one numpy sort per column) in the same run. Targets: peak ≤ 1 GiB,
   growth ≤ 25 % from 2M to 8M, wall ≤ 10× the floor.

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
import json
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from skewgate.common.verdict import Verdict
from skewgate.drift.core import DriftOptions, drift_gate

sys.path.insert(0, str(Path(__file__).parent))
from parity_bench import PEAK_MIB  # the VmHWM reader the benchmarks share

GIB = 1 << 30
SCALE_CHILD = PEAK_MIB + '''
import json, sys, time
import numpy as np, pyarrow.parquet as pq, pyarrow.dataset
mode, ref, cur = sys.argv[1:4]
out = {}
if mode == "floor":
    started = time.perf_counter()
    for path in (ref, cur):
        table = pq.read_table(path)
        for name in table.column_names:
            np.sort(table.column(name).to_numpy())
        del table
else:
    import scipy.special
    from skewgate.drift.core import drift_gate
    started = time.perf_counter()
    verdict = drift_gate(reference=ref, current=cur).verdict
    details = verdict.details
    out = {"status": verdict.status, "ks_error_bound": details["ks_error_bound"],
           "mmd_rows": details["mmd"]["rows"]["current"], "mmd_method": details["mmd"]["method"]}
print(json.dumps({**out, "seconds": time.perf_counter() - started, "peak_mib": peak_mib()}))
'''


def _save(path: Path, x: np.ndarray) -> Path:
    np.savez(path, x=x.astype(np.float32))
    return path


def whole_gate_in_subprocess(rows: int, dim: int, tmp: Path) -> dict:
    rng = np.random.default_rng(0)
    ref = _save(tmp / "ref.npz", rng.standard_normal((rows, dim), dtype=np.float32))
    cur = _save(tmp / "cur.npz", rng.standard_normal((rows, dim), dtype=np.float32))
    return scale_child("drift", ref, cur)


def write_parquet(path: Path, rows: int, *, seed: int, chunk: int = 1 << 20) -> Path:
    """4 standard-normal float64 features, written in row groups of `chunk` rows (never all in memory)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([(f"f{j}", pa.float64()) for j in range(4)])
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            block = rng.standard_normal((min(chunk, rows - start), 4))
            writer.write_table(pa.table({f"f{j}": block[:, j] for j in range(4)}, schema=schema))
    return path


def scale_child(mode: str, ref: Path, cur: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", SCALE_CHILD, mode, str(ref), str(cur)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def serving_scale(sizes: tuple[int, ...], tmp: Path) -> None:
    print(f"0. serving-log scale: Parquet, 4 float64 features, {' and '.join(f'{n:,}' for n in sizes)} rows per "
          "side (fresh child processes, peak = VmHWM)", flush=True)
    print(f"   {'rows/side':>10}  {'floor s':>8} {'floor MiB':>10}  {'drift s':>8} {'drift MiB':>10}  {'wall ×':>7}"
          f"  {'KS error':>9}  MMD rows", flush=True)
    peaks = {}
    for rows in sizes:
        ref, cur = write_parquet(tmp / f"ref{rows}.parquet", rows, seed=1), write_parquet(
            tmp / f"cur{rows}.parquet", rows, seed=2)
        floor, ours = scale_child("floor", ref, cur), scale_child("drift", ref, cur)
        peaks[rows] = ours["peak_mib"]
        print(f"   {rows:>10,}  {floor['seconds']:>8.2f} {floor['peak_mib']:>10.0f}  {ours['seconds']:>8.2f} "
              f"{ours['peak_mib']:>10.0f}  {ours['seconds'] / floor['seconds']:>7.1f}  {ours['ks_error_bound']:>9.2g}"
              f"  {ours['mmd_rows']:,}", flush=True)
        ref.unlink()
        cur.unlink()
    low, high = min(sizes), max(sizes)
    print(f"   peak growth {low:,} → {high:,}: {100 * (peaks[high] / peaks[low] - 1):+.0f} % (target ≤ 25 %), "
          f"peak at {high:,}: {peaks[high] / 1024:.2f} GiB (target ≤ 1), wall target ≤ 10× the floor\n", flush=True)


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
    parser.add_argument("--only", choices=["scale", "wide", "naive", "quality"], action="append",
                        help="run only these parts (repeatable)")
    args = parser.parse_args()
    parts = set(args.only or ["scale", "wide", "naive", "quality"])
    sizes, big, naive_rows, reps = (((200_000, 800_000), 20_000, 5_000, 40) if args.quick
                                    else ((2_000_000, 8_000_000), 100_000, 10_000, 200))
    import scipy.stats  # noqa: F401  (imported before any timing: neither side pays the import)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "scale" in parts:
            serving_scale(sizes, tmp)
        if "wide" in parts:
            print(f"1. whole gate, {big:,} × 512 vs {big:,} × 512 float32 (fresh subprocess)", flush=True)
            wide = whole_gate_in_subprocess(big, 512, tmp)
            print(f"   {wide['seconds']:.1f} s (target ≤ 60), peak RSS {wide['peak_mib'] / 1024:.2f} GiB "
                  f"(target ≤ 2), verdict {wide['status']}, KS error bound {wide['ks_error_bound']:.2g}\n"
                  f"   MMD: {wide['mmd_method']}\n",
                  flush=True)
        if "naive" in parts:
            naive_side_by_side(naive_rows, tmp)
        if "quality" in parts:
            quality(reps, tmp)


def naive_side_by_side(naive_rows: int, tmp: Path) -> None:
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


def quality(reps: int, tmp: Path) -> None:
    print("3. statistical quality, 64 features, 1,000 rows each side, α = 0.05 (KS, BH) and 0.05 (MMD)")
    print(f"   {'scenario':<28} {'expected':<9} {'reps':>5}  pass  warn  fail   KS flags       MMD flags")
    plan = [("none", "pass", reps), ("shift 0.2σ in 5/64", "warn/fail", reps // 2),
            ("correlation only", "warn", reps // 4), ("units bug (1 feature ×100)", "warn", reps // 4),
            ("both", "fail", reps // 4)]
    for kind, expected, count in plan:
        rng = np.random.default_rng(zlib.crc32(kind.encode()))
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
