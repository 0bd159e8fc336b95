"""Every check's pass or fail agrees with its value and limit: across the verdicts the demo's pipeline runs wrote
(a good, a defective and a weak candidate, healthy and drifted nights: passes and failures of every step), each
check name compares its value with its limit one way (at most, or at least) in every instance. A check whose value
is not on its limit's scale (a signed difference beside an allowed regression) reads as a violation when it
passes, or as a pass when it fails."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = Path(os.environ.get("SKEWGATE_DEMO_WORKDIR", ROOT / "work" / "demo"))
EPS = 1e-9


def _numeric(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def checks_by_name(verdicts: list[Path]) -> dict[tuple[str, str], list[tuple[float, float, bool]]]:
    found: dict[tuple[str, str], list[tuple[float, float, bool]]] = defaultdict(list)
    for path in verdicts:
        verdict = json.loads(path.read_text(encoding="utf-8"))
        for check in verdict["checks"]:
            if _numeric(check.get("value")) and _numeric(check.get("limit")):
                found[(verdict["step"], check["name"])].append((check["value"], check["limit"], check["passed"]))
    return found


def one_way(rows: list[tuple[float, float, bool]]) -> bool:
    at_most = all(passed == (value <= limit + EPS) for value, limit, passed in rows)
    at_least = all(passed == (value >= limit - EPS) for value, limit, passed in rows)
    return at_most or at_least


def test_the_rule_tells_a_consistent_check_from_an_inverted_one():
    assert one_way([(0.1, 0.5, True), (0.9, 0.5, False)])  # at most
    assert one_way([(0.9, 0.5, True), (0.1, 0.5, False)])  # at least
    # compare's old vs_champion: a signed difference judged against an allowed regression
    assert not one_way([(-0.10, 0.005, False), (0.0, 0.005, True)])


def test_every_check_in_the_demo_verdicts_passes_one_way_against_its_limit():
    verdicts = sorted(DEMO.glob("kfp/*/*/verdict"))
    if not verdicts:
        pytest.skip(f"no pipeline verdicts under {DEMO}/kfp: `make demo` writes them (.ci/run runs the demo first)")
    found = checks_by_name(verdicts)
    assert {step for step, _ in found} >= {"export", "calibrate", "drift", "parity", "probe", "compare"}
    assert any(not passed for rows in found.values() for *_, passed in rows)  # failures are among them
    inverted = {f"{step}/{name}": rows[:3] for (step, name), rows in found.items() if not one_way(rows)}
    assert not inverted, inverted
