"""Periods of a known cycle (`--period weekday`): which period each row belongs to, read from a timestamp column.

Serving traffic often has a weekly cycle (weekends buy other things than weekdays). Judged against the whole
training data, every Saturday then looks drifted, night after night. With a period, the reference profile holds
one profile per period (profile.py: `save_periodic`), and each night is judged against its own period's profile.

The timestamp column is a timestamp (any unit; with a zone, the weekday is the one in that zone), a date, or ISO-8601
text (all with a zone offset or all without). It is never a feature. A row without a timestamp has no period: an
`InputError`, since what cannot be assigned cannot be judged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

from skewgate.common.errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

Period = Literal["none", "weekday"]
PERIODS: tuple[Period, ...] = get_args(Period)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True)
class PeriodRows:
    """The rows of one period: those whose `column` falls in `label` of `period`."""

    period: Period
    column: str
    label: str


def labels(column: pa.Array | pa.ChunkedArray, *, period: Period, name: str, source: str) -> np.ndarray:
    """Each row's period label (`WEEKDAYS` for "weekday"), as an array of strings."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if period != "weekday":
        raise InputError("--period", expected=f"one of {[p for p in PERIODS if p != 'none']}", found=period)
    if column.null_count:
        raise InputError(source, field=name, expected="a timestamp in every row (it sets the row's period)",
                         found=f"{column.null_count:,} rows without one")
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = _parse(column, name=name, source=source)
    elif not (pa.types.is_timestamp(kind) or pa.types.is_date(kind)):
        raise InputError(source, field=name, expected="a timestamp, a date or ISO-8601 text (it sets the row's "
                                                      "period)", found=f"type {kind}")
    days = pc.day_of_week(column).to_numpy(zero_copy_only=False)  # 0 = Monday, in the timestamp's own zone
    return np.asarray(WEEKDAYS, dtype=object)[days]  # Python strings: labels are JSON keys


def _parse(column: pa.Array | pa.ChunkedArray, *, name: str, source: str) -> pa.Array | pa.ChunkedArray:
    import pyarrow as pa

    errors = []
    for kind in (pa.timestamp("us"), pa.timestamp("us", tz="UTC")):  # without a zone offset, then with one
        try:
            return column.cast(kind)
        except pa.ArrowInvalid as err:
            errors.append(str(err))
    raise InputError(source, field=name, expected="ISO-8601 timestamps or dates, all with a zone offset or all "
                                                  "without", found=errors[-1])


def single_label(counts: Counter[str], *, column: str, source: str, period: Period) -> str:
    """The one period every row of a night falls in; a night spanning several cannot be judged against one
    period's profile (split the snapshot by day, or judge it without --period)."""
    if len(counts) == 1:
        return next(iter(counts))
    if not counts:
        raise InputError(source, field=column, expected="at least one row", found="none")
    found = ", ".join(f"{label} ({counts[label]:,} rows)" for label in ordered(counts))
    raise InputError(source, field=column, expected=f"rows of one {period} (a night judged against that {period}'s "
                                                    "profile)", found=found)


def ordered(found: Iterable[str]) -> list[str]:
    """Labels in the cycle's order (Mon … Sun)."""
    return sorted(found, key=lambda label: WEEKDAYS.index(label) if label in WEEKDAYS else len(WEEKDAYS))

