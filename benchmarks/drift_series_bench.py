"""Nightly false alarms over a year: the anytime-valid series (components/skewgate/drift/stats/series.py) beside the
per-night test.

Each simulated year draws one reference profile (n standard-normal values, the stored profile with its own
sampling noise) and judges 365 nights of m serving values against it, through the drift gate's KS statistic and
p-value (`stats/ks.py`) and the series' p-value, e-value and e-process (`series.py`).

- null: the share of years with any alarm — the per-night KS test at alpha (alarms whenever a night's p < alpha)
  and the series (alarms on tonight alone, or once its e-process reaches 1/(alpha − delta − alpha_night)); the
  series' bound is alpha over every night.
- shift: from night `--shift-night` the serving values move by each of `--shifts` σ; the delay in nights to the
  first alarm on or after that night (per-night: its first alarm from then on; the series: its first alarm).

Beside them, Bonferroni over the year: a night alarms when its two-sample p < alpha/365. It bounds any false alarm
within the year (not beyond it), and, like the per-night test, it has no effect floor. The series judges with the
gate's effect floor (`--min-effect`, 0.05 as the gate), so a shift whose KS distance stays below it is, by design,
never an alarm.

    .venv/bin/python benchmarks/drift_series_bench.py [--years 200] [--nights 365] [--reference 5000] [--current 500]
        [--shifts 0.1,0.2,0.5] [--min-effect 0.05] [--night-share 0.5]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from skewgate.drift.stats import ks
from skewgate.drift.stats.series import SeriesOptions, advance, night_evidence


def year(rng: np.random.Generator, *, nights: int, n: int, m: int, alpha: float, options: SeriesOptions,
         min_effect: float, shift: float = 0.0,
         shift_night: int | None = None) -> tuple[list[int], list[int], int | None]:
    """(nights the per-night test alarmed, nights Bonferroni-365 alarmed, the night the series first alarmed) over
    one year (1-based nights)."""
    reference = ks.ReferenceECDF.exact(rng.normal(size=n))
    per_night: list[int] = []
    bonferroni: list[int] = []
    state = None
    series_alarm = None
    for night in range(1, nights + 1):
        moved = shift if shift_night is not None and night >= shift_night else 0.0
        d = ks.ks_statistic(reference, rng.normal(loc=moved, size=m))
        p_two_sample = ks.ks_pvalue(d, n, m)
        if p_two_sample < alpha:
            per_night.append(night)
        if p_two_sample < alpha / 365:
            bonferroni.append(night)
        if series_alarm is None:
            evidence = night_evidence([{"test": "ks", "statistic": d, "effect": d, "pvalue": p_two_sample,
                                        "reference_n": n, "current_n": m}], delta=options.delta,
                                      min_effect=min_effect)
            state = advance(state, evidence, profile="reference", options=options)
            series_alarm = state.alarmed_night
    return per_night, bonferroni, series_alarm


def share(hits: int, total: int) -> str:
    rate = hits / total
    return f"{rate:.3f} ± {math.sqrt(max(rate * (1 - rate), 1e-12) / total):.3f}"


def _delays(alarms: list[int], shift_night: int) -> tuple[float, bool]:
    """(nights from the shift to the first alarm on or after it, inf if none; whether one came before it)."""
    after = [k for k in alarms if k >= shift_night]
    return (after[0] - shift_night if after else math.inf), any(k < shift_night for k in alarms)


def _summary(name: str, delays: list[float], before: int, years: int) -> str:
    d = np.sort(np.array(delays))
    finite = d[np.isfinite(d)]
    return (f"  {name}: median {d[(d.size - 1) // 2]:.0f}, p90 {d[math.ceil(0.9 * d.size) - 1]:.0f}, never "
            f"{np.mean(~np.isfinite(d)):.3f}, mean of detected {finite.mean() if finite.size else math.nan:.1f}; "
            f"years already alarmed before the shift: {before / years:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--years", type=int, default=200)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--reference", type=int, default=5000, help="values in the stored profile")
    parser.add_argument("--current", type=int, default=500, help="serving values per night")
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--shifts", default="0.1,0.2,0.5", help="mean shifts, in σ (comma-separated)")
    parser.add_argument("--shift-night", type=int, default=100)
    parser.add_argument("--min-effect", type=float, default=0.05, help="the gate's effect floor (KS D)")
    parser.add_argument("--night-share", type=float, default=SeriesOptions.night_share,
                        help="share of alpha for the tonight-alone alarm (the rest, less delta, is the e-process')")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    options = SeriesOptions(alpha=args.alpha, night_share=args.night_share)
    rng = np.random.default_rng(args.seed)
    n, m = args.reference, args.current
    print(f"{args.years} years × {args.nights} nights, reference n = {n}, m = {m} per night, alpha = {args.alpha} "
          f"(series: delta = {options.delta:.3g} on the reference, alarm at e ≥ {options.threshold:.3g}, effect "
          f"floor {args.min_effect})")

    start = time.perf_counter()
    per_any = bonferroni_any = series_any = alarms = 0
    for _ in range(args.years):
        nights, bonferroni, alarm = year(rng, nights=args.nights, n=n, m=m, alpha=args.alpha, options=options,
                                         min_effect=args.min_effect)
        per_any += bool(nights)
        alarms += len(nights)
        bonferroni_any += bool(bonferroni)
        series_any += alarm is not None
    print(f"\nnull ({time.perf_counter() - start:.0f} s): share of years with any alarm")
    print(f"  per-night KS at alpha: {share(per_any, args.years)}   ({alarms / args.years:.1f} alarms a year, "
          f"{alarms / (args.years * args.nights):.3f} of nights)")
    print(f"  Bonferroni-365: {share(bonferroni_any, args.years)}   (bound: {args.alpha} within the year)")
    print(f"  series (anytime-valid): {share(series_any, args.years)}   (bound: {args.alpha} over every night)")

    for shift in (float(x) for x in args.shifts.split(",")):
        start = time.perf_counter()
        delays: dict[str, list[float]] = {"per-night KS at alpha": [], "Bonferroni-365": [],
                                          "series (anytime-valid)": []}
        early = dict.fromkeys(delays, 0)
        for _ in range(args.years):
            nights, bonferroni, alarm = year(rng, nights=args.nights, n=n, m=m, alpha=args.alpha, options=options,
                                             min_effect=args.min_effect, shift=shift, shift_night=args.shift_night)
            for name, found in zip(delays, (nights, bonferroni, [] if alarm is None else [alarm]), strict=True):
                delay, before = _delays(found, args.shift_night)
                delays[name].append(delay)
                early[name] += before
        print(f"\n{shift}σ shift from night {args.shift_night} ({time.perf_counter() - start:.0f} s): nights from "
              f"the shift to the first alarm on or after it (median, 90th percentile, share never within the year)")
        for name, found_delays in delays.items():
            print(_summary(name, found_delays, early[name], args.years))


if __name__ == "__main__":
    main()
