"""What a sample count can resolve, for the gates that count changed samples (INT8's top-1 flips in calibrate
and parity, an accuracy drop): the smallest rate of changed samples that `n` samples can tell from none, and the
interval of an observed rate. Both steps state it with their INT8 judgement, from this one place, so that a
budget finer than the samples can see is said, not silently passed (64 samples cannot tell a 1% budget from 0:
none of 64 flipped still admits 4.6%).
"""

from __future__ import annotations

import math
from statistics import NormalDist

CONFIDENCE = 0.95


def smallest_resolvable(n: int, confidence: float = CONFIDENCE) -> float:
    """The one-sided upper confidence bound on the rate when none of `n` samples changed: 1 − α^(1/n), exact
    (Clopper–Pearson at zero). A budget below it cannot be told from zero with `n` samples."""
    if n <= 0:
        return 1.0
    return 1.0 - (1.0 - confidence) ** (1.0 / n)


def samples_needed(budget: float, confidence: float = CONFIDENCE) -> int | None:
    """The fewest samples whose `smallest_resolvable` is within `budget`; None for a budget of 0 or less."""
    if budget <= 0:
        return None
    if budget >= 1:
        return 1
    return math.ceil(math.log(1.0 - confidence) / math.log1p(-budget))


def rate_interval(changed: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval for a rate of `changed` out of `n` (two-sided, `confidence`)."""
    if n <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    rate = changed / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def describe(changed: int, n: int, budget: float, confidence: float = CONFIDENCE) -> str:
    """One sentence for a verdict: the observed rate with its interval, what `n` samples resolve, and whether
    the budget is finer than that (with the sample count that would resolve it)."""
    low, high = rate_interval(changed, n, confidence)
    smallest = smallest_resolvable(n, confidence)
    text = (f"{changed}/{n} samples changed ({confidence:.0%} interval {low:.2%}–{high:.2%}); {n} samples resolve "
            f"a change of {smallest:.2%}")
    if budget < smallest:
        needed = samples_needed(budget, confidence)
        text += (f": the budget {budget:.2%} is below that, so a pass cannot show the change is within it"
                 + (f" (≥ {needed} samples would)" if needed else ""))
    return text
