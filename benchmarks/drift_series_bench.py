"""Nightly false alarms over a year: the anytime-valid series (components/skewgate/drift/stats/series.py) beside the
per-night test.

Each simulated year draws one reference profile (n standard-normal values, the stored profile with its own
sampling noise) and judges 365 nights of m serving values against it, through the drift gate's KS statistic and
p-value (`stats/ks.py`) and the series' p-value, e-value and e-process (`series.py`).

- null: the share of years with any alarm — the per-night KS test at alpha (alarms whenever a night's p < alpha)
  and the series (alarms once its e-value reaches 1/(alpha − delta)); the series' bound is alpha.
- shift: from night `--shift-night` the serving values move by `--shift` σ; the delay in nights to the first
  alarm on or after that night (per-night: its first alarm from then on; the series: its e-process crossing).

    .venv/bin/python benchmarks/drift_series_bench.py [--years 200] [--nights 365] [--reference 5000] [--current 500]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from skewgate.drift.stats import ks
from skewgate.drift.stats.series import SeriesOptions, advance, night_pvalue


def year(rng: np.random.Generator, *, nights: int, n: int, m: int, alpha: float, options: SeriesOptions,
         shift: float = 0.0, shift_night: int | None = None) -> tuple[list[int], int | None]:
    """(nights the per-night test alarmed, the night the series first alarmed) over one year (1-based nights)."""
    reference = ks.ReferenceECDF.exact(rng.normal(size=n))
    per_night: list[int] = []
    state = None
    series_alarm = None
    for night in range(1, nights + 1):
        moved = shift if shift_night is not None and night >= shift_night else 0.0
        d = ks.ks_statistic(reference, rng.normal(loc=moved, size=m))
        if ks.ks_pvalue(d, n, m) < alpha:
            per_night.append(night)
        if series_alarm is None:
            p, _ = night_pvalue([{"test": "ks", "statistic": d, "effect": d, "reference_n": n, "current_n": m}],
                                delta=options.delta)
            state = advance(state, p, profile="reference", options=options)
            series_alarm = state.alarmed_night
        elif shift_night is None:
            continue  # the null year's series has alarmed: only the per-night count goes on
    return per_night, series_alarm


def share(hits: int, total: int) -> str:
    rate = hits / total
    return f"{rate:.3f} ± {math.sqrt(max(rate * (1 - rate), 1e-12) / total):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--years", type=int, default=200)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--reference", type=int, default=5000, help="values in the stored profile")
    parser.add_argument("--current", type=int, default=500, help="serving values per night")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--shift", type=float, default=0.2, help="mean shift, in σ")
    parser.add_argument("--shift-night", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    options = SeriesOptions(alpha=args.alpha)
    rng = np.random.default_rng(args.seed)
    n, m = args.reference, args.current
    print(f"{args.years} years × {args.nights} nights, reference n = {n}, m = {m} per night, alpha = {args.alpha} "
          f"(series: delta = {options.delta:.3g} on the reference, alarm at e ≥ {options.threshold:.3g})")

    start = time.perf_counter()
    per_any = series_any = alarms = 0
    for _ in range(args.years):
        nights, alarm = year(rng, nights=args.nights, n=n, m=m, alpha=args.alpha, options=options)
        per_any += bool(nights)
        alarms += len(nights)
        series_any += alarm is not None
    print(f"\nnull ({time.perf_counter() - start:.0f} s): share of years with any alarm")
    print(f"  per-night KS at alpha: {share(per_any, args.years)}   ({alarms / args.years:.1f} alarms a year, "
          f"{alarms / (args.years * args.nights):.3f} of nights)")
    print(f"  series (anytime-valid): {share(series_any, args.years)}   (bound: {args.alpha})")

    start = time.perf_counter()
    per_delay: list[float] = []
    series_delay: list[float] = []
    early = [0, 0]  # years alarmed before the shift: per-night, series
    for _ in range(args.years):
        nights, alarm = year(rng, nights=args.nights, n=n, m=m, alpha=args.alpha, options=options,
                             shift=args.shift, shift_night=args.shift_night)
        early[0] += any(k < args.shift_night for k in nights)
        after = [k for k in nights if k >= args.shift_night]
        per_delay.append(after[0] - args.shift_night if after else math.inf)
        if alarm is not None and alarm < args.shift_night:
            early[1] += 1
        series_delay.append(alarm - args.shift_night if alarm is not None and alarm >= args.shift_night
                            else math.inf)
    print(f"\n{args.shift}σ shift from night {args.shift_night} ({time.perf_counter() - start:.0f} s): nights from "
          f"the shift to the first alarm on or after it (median, 90th percentile, share never within the year)")
    for name, delays, before in (("per-night KS at alpha", per_delay, early[0]),
                                 ("series (anytime-valid)", series_delay, early[1])):
        d = np.sort(np.array(delays))
        finite = d[np.isfinite(d)]
        print(f"  {name}: median {d[(d.size - 1) // 2]:.0f}, p90 {d[math.ceil(0.9 * d.size) - 1]:.0f}, never "
              f"{np.mean(~np.isfinite(d)):.3f}, mean of detected {finite.mean() if finite.size else math.nan:.1f}; "
              f"years already alarmed before the shift: {before / args.years:.3f}")


if __name__ == "__main__":
    main()
