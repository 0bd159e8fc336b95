import numpy as np
import pytest

from skewgate.drift.core import DriftOptions, drift_gate
from skewgate.drift.stats import threads
from tests.drift.conftest import make_frame


def test_map_features_keeps_the_items_order_and_raises_what_an_item_raised():
    assert threads.map_features(lambda x: x * x, range(50)) == [x * x for x in range(50)]

    def fails_on_seven(x: int) -> int:
        if x == 7:
            raise ValueError("item 7")
        return x

    with pytest.raises(ValueError, match="item 7"):
        threads.map_features(fails_on_seven, range(20))


@pytest.mark.parametrize("length", [0, 1, 2, 3, 17])
def test_in_parts_covers_every_row_once(length):
    seen = np.zeros(length, dtype=int)

    def mark(part: slice) -> None:
        seen[part] += 1

    threads.in_parts(mark, length)
    assert seen.tolist() == [1] * length


def test_the_verdict_does_not_depend_on_the_number_of_threads(write, monkeypatch):
    """One thread or four: the same statistics, p-values and verdict (results come back in feature order)."""
    ref = write("ref", make_frame(4_000, seed=1))
    cur = write("cur", make_frame(4_000, seed=2, shift=0.3))
    details = []
    for count in (1, 4):
        monkeypatch.setattr(threads, "workers", lambda count=count: count)
        verdict = drift_gate(reference=ref, current=cur, options=DriftOptions(batch_rows=1_000)).verdict
        details.append((verdict.status, verdict.details["features"], verdict.details["mmd"]["value"]))
    assert details[0] == details[1]
    assert details[0][0] != "pass"
