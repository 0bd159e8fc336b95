"""One streamed pass over a data set into mergeable statistics (`SideStats`): per numeric feature a quantile
sketch, its NaN count and its coverage of the reference deciles; per categorical feature its counts; for MMD
the sum of the random features of (a seeded share of) the rows, and — while few enough — the rows themselves.

Everything random is drawn per file (seeded by the seed and the file's name), so a data set split over several
tasks draws what one pass draws. Memory: one batch, the sketches (bounded by their capacity and `exact_rows`),
the categories seen, `keep_rows` and `sample_rows` rows of the MMD input.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.drift.stats.categories import SELECTION_SHARE, selection_rows
from skewgate.drift.stats.mmd import RandomFeatures
from skewgate.drift.stats.sketch import QuantileSketch, SketchBuilder, merge_sketches
from skewgate.drift.stats.source import Batch
from skewgate.drift.stats.threads import in_parts, map_features

COVERAGE_BINS = 13  # below min, deciles 1..10, above max, NaN
# the most bytes of MMD-input rows a reference pass keeps for MMD (`select_rate`): 131,072 rows of 512 float32
# features; a wider input (a large embedding) is read a second time instead
SELECT_BUDGET = 256 << 20
Embedder = Callable[[Batch], np.ndarray]


@dataclass(frozen=True)
class MmdPlan:
    """How rows enter MMD: standardised with the reference's center and scale, mapped by `features`; a share
    `rate` of them (seeded per file); their standardised values kept while at most `keep_rows`."""

    center: np.ndarray
    scale: np.ndarray
    features: RandomFeatures
    rate: float = 1.0
    keep_rows: int = 0


@dataclass
class SideStats:
    """Mergeable statistics of one side. Optional parts are None when the pass did not compute them."""

    rows: int
    numeric_names: tuple[str, ...]
    sketches: list[QuantileSketch]
    nan: np.ndarray  # int64 per numeric feature: NaN and ±Inf values (missing or non-finite)
    categories: dict[str, dict[str, int]]
    missing: dict[str, int]  # nulls per categorical feature
    coverage: np.ndarray | None = None  # counts, numeric features × COVERAGE_BINS
    rff_sum: np.ndarray | None = None
    mmd_rows: int = 0
    kept: np.ndarray | None = None  # standardised MMD rows, None once more than keep_rows
    keep_rows: int = 0
    moments: np.ndarray | None = None  # 3 × MMD dims: count, mean, M2 of the finite values
    sample: np.ndarray | None = None  # the MMD-input rows with the smallest keys (a uniform sample)
    sample_keys: np.ndarray | None = None
    id_selection: dict[str, dict[str, int]] = field(default_factory=dict)  # id counts in the rows that rank ids
    # the raw MMD-input rows MMD would draw (`Accumulator(select_rate=…)`), per batch; None when not asked or over
    # the budget: the reference's MMD is then computed in a second pass
    mmd_selected: list[np.ndarray] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def nan_share(self) -> dict[str, float]:
        """Per feature: missing or non-finite (NaN, ±Inf) values / values (a pooled N-D feature has several values
        per row)."""
        rows = max(self.rows, 1)
        totals = [s.n + int(c) for s, c in zip(self.sketches, self.nan, strict=True)] if self.sketches else []
        shares = {n: int(c) / (totals[j] if totals and totals[j] else rows)
                  for j, (n, c) in enumerate(zip(self.numeric_names, self.nan, strict=True))}
        return shares | {n: c / rows for n, c in self.missing.items()}

    def coverage_shares(self) -> np.ndarray:
        """Coverage counts as shares of each feature's values."""
        if self.coverage is None:
            return np.zeros((len(self.numeric_names), COVERAGE_BINS))
        totals = np.array([s.n + int(c) for s, c in zip(self.sketches, self.nan, strict=True)], dtype=np.float64)
        return self.coverage / np.maximum(totals, 1)[:, None]

    def standardisation(self) -> tuple[np.ndarray, np.ndarray]:
        """Per-column mean and standard deviation of the MMD input; constant or empty columns get scale 1."""
        assert self.moments is not None
        count, mean, m2 = self.moments
        std = np.sqrt(np.where(count > 0, m2 / np.maximum(count, 1), np.nan))
        center = np.nan_to_num(mean).astype(np.float32)
        return center, np.where(np.isfinite(std) & (std > 0), std, 1.0).astype(np.float32)


class Accumulator:
    """Feed `Batch`es, then take `result()`. `tables`: sketches, NaN and category counts; `edges`: coverage of
    these reference bins; `mmd`: random-feature sums; `sample_rows`: moments and a sample of the MMD input;
    `split_ids`: id features whose counts are split between the rows that rank the ids (a seeded share
    `selection_share`, `categories.selection_rows`) and the rows that are tested (the reference's first pass)."""

    def __init__(self, numeric_names: tuple[str, ...], source_numeric: tuple[str, ...],
                 categorical_names: Iterable[str], *, seed: int, exact_rows: int, capacity: int,
                 tables: bool = True, edges: np.ndarray | None = None, mmd: MmdPlan | None = None,
                 sample_rows: int = 0, embedder: Embedder | None = None, split_ids: Collection[str] = (),
                 selection_share: float = SELECTION_SHARE, select_rate: float | None = None) -> None:
        self.names = numeric_names
        self.order = np.array([source_numeric.index(n) for n in numeric_names], dtype=np.int64)
        self.identity = list(self.order) == list(range(len(source_numeric)))
        self.categorical = tuple(categorical_names)
        self.seed, self.tables, self.edges, self.mmd = seed, tables, edges, mmd
        self.sample_rows, self.embedder = sample_rows, embedder
        per_column = exact_rows if not numeric_names else min(exact_rows, (1 << 26) // len(numeric_names))
        self.builders = [SketchBuilder(capacity=capacity, exact_rows=per_column) for _ in numeric_names]
        self.rows = 0
        self.nan = np.zeros(len(numeric_names), dtype=np.int64)
        self.counts: dict[str, Counter[str]] = {n: Counter() for n in self.categorical}
        self.missing = dict.fromkeys(self.categorical, 0)
        self.split = tuple(n for n in self.categorical if n in set(split_ids))
        self.selection_share = selection_share
        self.selection: dict[str, Counter[str]] = {n: Counter() for n in self.split}
        self._row_offsets: dict[str, int] = {}
        self.coverage = np.zeros((len(numeric_names), COVERAGE_BINS), dtype=np.int64)
        self.rff_sum: np.ndarray | None = None
        self.mmd_rows = 0
        self.kept: list[np.ndarray] | None = [] if mmd is not None and mmd.keep_rows > 0 else None
        self.kept_rows = 0
        self.moments: np.ndarray | None = None
        self.sample: np.ndarray | None = None
        self.sample_keys = np.zeros(0)
        self._rngs: dict[tuple[str, int], np.random.Generator] = {}
        # both draw MMD's rows from one seeded stream per file: one accumulator does one or the other
        assert select_rate is None or mmd is None, "select the rows for MMD, or add them: not both"
        self.select_rate = select_rate
        self.selected: list[np.ndarray] | None = [] if select_rate is not None else None
        self._selected_bytes = 0

    def _rng(self, origin: str, purpose: int) -> np.random.Generator:
        key = (origin, purpose)
        if key not in self._rngs:
            self._rngs[key] = np.random.default_rng([self.seed, zlib.crc32(origin.encode()), purpose])
        return self._rngs[key]

    def add(self, batch: Batch) -> None:
        numeric = batch.numeric if self.identity else batch.numeric[:, self.order]
        self.rows += batch.rows
        ordered = self._add_tables(numeric, batch) if self.tables else None
        if self.edges is not None:
            self._add_coverage(numeric, batch, ordered)
        if self.mmd is None and not self.sample_rows and self.selected is None:
            return
        mmd_input = self.embedder(batch) if self.embedder is not None else numeric
        if self.sample_rows:
            if ordered is not None and self.embedder is None:  # the MMD input is these columns: one pass less
                self._add_column_moments(ordered)
            else:
                self._add_moments(mmd_input)
            self._add_sample(mmd_input, self._rng(batch.origin, 1).random(len(mmd_input)))
        if self.selected is not None:
            self._select(self._mmd_rows(mmd_input, batch.origin, self.select_rate or 1.0))
        if self.mmd is not None:
            self.add_mmd_rows(self._mmd_rows(mmd_input, batch.origin, self.mmd.rate))

    def _columns(self, numeric: np.ndarray, batch: Batch) -> list[np.ndarray]:
        """Each feature's values in this batch: its column, or every pooled value of an N-D feature."""
        return [batch.pooled[int(k)] if int(k) in batch.pooled else numeric[:, j] for j, k in enumerate(self.order)]

    def _add_tables(self, numeric: np.ndarray, batch: Batch) -> list[np.ndarray] | None:
        """Adds the batch to the sketches and counts; returns each feature's finite values sorted, when one sort
        of the batch made them (columns, not pooled N-D features): coverage counts its bins from them."""
        ordered_columns = None
        if batch.pooled:
            for j, values in enumerate(self._columns(numeric, batch)):
                finite = np.isfinite(values)
                self.nan[j] += int(values.size - finite.sum())
                self.builders[j].add(values[finite])
        else:
            # a row per feature, sorted: -Inf first, then the finite values, +Inf, NaN last
            ordered = _sorted_rows(numeric)
            # where each row's finite values start and end: two binary searches, not two passes over the batch
            first = [int(np.searchsorted(row, -np.inf, side="right")) for row in ordered]
            end = [int(np.searchsorted(row, np.inf, side="left")) for row in ordered]
            ordered_columns = [row[a:b] for row, a, b in zip(ordered, first, end, strict=True)]
            # NaN and ±Inf alike: values the tests cannot use
            self.nan += len(numeric) - np.array([len(c) for c in ordered_columns], dtype=np.int64)
            for builder, values in zip(self.builders, ordered_columns, strict=True):
                builder.add(values, presorted=True)
        start = self._row_offsets.get(batch.origin, 0)
        self._row_offsets[batch.origin] = start + batch.rows
        ranking = selection_rows(self.seed, batch.origin, start, batch.rows, self.selection_share) \
            if self.split else None
        for name in self.categorical:
            column = batch.categorical[name]
            if ranking is None or name not in self.selection:
                self._add_categories(self.counts[name], name, column)
                continue
            # an N-D id array holds several values per row: a row's values stay on one side
            per_row = np.repeat(ranking, len(column) // max(batch.rows, 1)) if len(column) != batch.rows else ranking
            self._add_categories(self.selection[name], name, _take(column, per_row))
            self._add_categories(self.counts[name], name, _take(column, ~per_row))
        return ordered_columns

    def _add_categories(self, into: Counter[str], name: str, column: Any) -> None:
        if isinstance(column, np.ndarray):  # ids from an .npz
            values, counts = np.unique(column, return_counts=True)
            into.update({str(v): int(c) for v, c in zip(values, counts, strict=True)})
            return
        import pyarrow.compute as pc

        self.missing[name] += int(column.null_count)
        if hasattr(column, "dictionary_decode") and hasattr(column, "dictionary"):
            column = column.dictionary_decode()
        counted = pc.value_counts(column.drop_null())
        values, counts = counted.field("values").to_pylist(), counted.field("counts").to_pylist()
        into.update({str(v): int(c) for v, c in zip(values, counts, strict=True)})

    def _add_coverage(self, numeric: np.ndarray, batch: Batch, ordered: list[np.ndarray] | None) -> None:
        """Counts of the batch's values per bin of the reference's deciles: below, 10 deciles, above, non-finite.
        From `ordered` (each feature's finite values sorted) eleven binary searches a feature; else per value."""
        assert self.edges is not None
        if ordered is not None:
            for j, (values, edges) in enumerate(zip(ordered, self.edges, strict=True)):
                self.coverage[j, 12] += batch.rows - len(values)
                if not np.isnan(edges).any():
                    self.coverage[j, :12] += _sorted_bins(values, edges)
            return
        for j, column in enumerate(self._columns(numeric, batch)):
            edges = self.edges[j]
            nan = ~np.isfinite(column)  # the last bin: missing or non-finite, as `nan` counts them
            self.coverage[j, 12] += int(nan.sum())
            if np.isnan(edges).any():
                continue
            values = column[~nan].astype(np.float64)
            below, above = values < edges[0], values > edges[-1]
            inside = values[~below & ~above]
            bins = np.clip(np.searchsorted(edges[1:-1], inside, side="right"), 0, 9)
            self.coverage[j, 1:11] += np.bincount(bins, minlength=10)
            self.coverage[j, 0] += int(below.sum())
            self.coverage[j, 11] += int(above.sum())

    def _add_moments(self, x: np.ndarray) -> None:
        """Count, mean and M2 per column of the finite values; float32 temporaries, float64 sums."""
        values = np.asarray(x, dtype=np.float32)
        finite = np.isfinite(values)
        if finite.all():
            count = np.full(values.shape[1], float(len(values)))
            mean = values.sum(axis=0, dtype=np.float64) / max(len(values), 1)
            deviation = values - mean.astype(np.float32)
        else:
            count = finite.sum(axis=0).astype(np.float64)
            mean = np.where(finite, values, 0).sum(axis=0, dtype=np.float64) / np.maximum(count, 1)
            deviation = np.where(finite, values - mean.astype(np.float32), np.float32(0))
        np.square(deviation, out=deviation)
        m2 = deviation.sum(axis=0, dtype=np.float64)
        self.moments = _merge_moments(self.moments, np.stack([count, mean, m2]))

    def _add_column_moments(self, columns: list[np.ndarray]) -> None:
        """`_add_moments` from each column's finite values (the sorted columns `_add_tables` made): contiguous
        rows, where the batch's columns are strided, and no batch-sized temporary."""

        def moments(values: np.ndarray) -> tuple[float, float, float]:
            if not values.size:
                return 0.0, 0.0, 0.0
            mean = float(values.sum(dtype=np.float64)) / values.size
            deviation = values - np.float32(mean)
            np.square(deviation, out=deviation)
            return float(values.size), mean, float(deviation.sum(dtype=np.float64))

        rows = np.array(map_features(moments, columns), dtype=np.float64).reshape(-1, 3)
        self.moments = _merge_moments(self.moments, rows.T)

    def _add_sample(self, x: np.ndarray, keys: np.ndarray) -> None:
        """Keeps the `sample_rows` rows with the smallest keys so far. The batch's own smallest first: the rest
        cannot be among them, and a whole wide batch is not copied to be merged with the sample."""
        rows, keys = _smallest(x, keys, self.sample_rows)
        rows = np.asarray(rows, dtype=np.float32)
        if self.sample is not None:
            rows, keys = np.concatenate([self.sample, rows]), np.concatenate([self.sample_keys, keys])
        self.sample, self.sample_keys = _smallest(rows, keys, self.sample_rows)

    def _mmd_rows(self, x: np.ndarray, origin: str, rate: float) -> np.ndarray:
        """The rows of this batch that enter MMD: a seeded share `rate` per file (every row at 1)."""
        return x[self._rng(origin, 2).random(len(x)) < rate] if rate < 1.0 else x

    def _select(self, rows: np.ndarray) -> None:
        """Keeps the rows MMD will draw, while they fit in `SELECT_BUDGET` bytes (else none: a second pass)."""
        assert self.selected is not None
        self._selected_bytes += rows.nbytes
        if self._selected_bytes > SELECT_BUDGET:
            self.selected = None
        else:
            self.selected.append(rows)

    def add_mmd_rows(self, x: np.ndarray) -> None:
        """MMD's share of a batch (`_mmd_rows`), standardised with the plan and summed in random features."""
        from skewgate.drift.stats.profile import standardise

        assert self.mmd is not None
        z = standardise(x, self.mmd.center, self.mmd.scale)
        total = self.mmd.features.transform(z).sum(axis=0, dtype=np.float64)
        self.rff_sum = total if self.rff_sum is None else self.rff_sum + total
        self.mmd_rows += len(z)
        if self.kept is not None:
            self.kept_rows += len(z)
            self.kept = [*self.kept, z] if self.kept_rows <= self.mmd.keep_rows else None

    def result(self) -> SideStats:
        return SideStats(
            rows=self.rows, numeric_names=self.names,
            sketches=map_features(SketchBuilder.result, self.builders) if self.tables else [],
            nan=self.nan, categories={n: dict(c) for n, c in self.counts.items()}, missing=self.missing,
            coverage=self.coverage if self.edges is not None else None,
            rff_sum=self.rff_sum, mmd_rows=self.mmd_rows,
            kept=None if self.kept is None else _stack(self.kept, self.mmd),
            keep_rows=self.mmd.keep_rows if self.mmd else 0,
            moments=self.moments, sample=self.sample, sample_keys=self.sample_keys if self.sample_rows else None,
            id_selection={n: dict(c) for n, c in self.selection.items()}, mmd_selected=self.selected)


def replay_mmd(selected: list[np.ndarray], plan: MmdPlan, numeric_names: tuple[str, ...]) -> SideStats:
    """The statistics a second MMD pass (`Accumulator(tables=False, mmd=plan)`) computes, from the rows the
    first pass selected at the plan's rate: the same rows, batch by batch, without reading the data again."""
    acc = Accumulator(numeric_names, numeric_names, (), seed=0, exact_rows=0, capacity=2, tables=False, mmd=plan)
    for rows in selected:
        acc.add_mmd_rows(rows)
    return acc.result()


def _sorted_rows(numeric: np.ndarray) -> np.ndarray:
    """`numeric`'s columns as rows, each sorted: transposed a block of about 32,768 values at a time (64 rows of
    512 features; a whole-matrix transpose, or 4,096-row blocks, strides through memory at 2.5-3× the time),
    then sorted in place on every core (no second copy)."""
    rows, columns = numeric.shape
    ordered = np.empty((columns, rows), dtype=numeric.dtype)
    block = max(64, (1 << 15) // max(columns, 1))
    for start in range(0, rows, block):
        ordered[:, start:start + block] = numeric[start:start + block].T

    def sort(part: slice) -> None:
        ordered[part].sort(axis=1)

    in_parts(sort, columns)
    return ordered


def _sorted_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """`_add_coverage`'s first twelve bins of ascending `values`: below `edges[0]`, then [e_k, e_k+1) for the
    first nine deciles and [e_9, e_10] for the last, then above `edges[-1]` (as `searchsorted(side="right")` over
    the inner edges bins one value at a time; compared in float64, as that path is)."""
    below = np.searchsorted(values, edges, side="left")  # values < each edge
    upto_last = int(np.searchsorted(values, edges[-1], side="right"))
    return np.concatenate([[below[0]], np.diff(np.append(below[:10], upto_last)), [len(values) - upto_last]])


def _take(column: Any, mask: np.ndarray) -> Any:
    """The values of an `.npz` array or an Arrow array where `mask` holds."""
    if isinstance(column, np.ndarray):
        return column[mask]
    import pyarrow as pa

    return column.filter(pa.array(mask))


def empty_side(numeric_names: tuple[str, ...], categorical: tuple[str, ...], rff_size: int) -> SideStats:
    """The statistics of no rows (a shard that was dealt no files): merging it changes nothing."""
    k = len(numeric_names)
    return SideStats(rows=0, numeric_names=numeric_names, sketches=[QuantileSketch.of(np.zeros(0)) for _ in range(k)],
                     nan=np.zeros(k, dtype=np.int64), categories={n: {} for n in categorical},
                     missing=dict.fromkeys(categorical, 0), coverage=np.zeros((k, COVERAGE_BINS), dtype=np.int64),
                     rff_sum=np.zeros(rff_size), mmd_rows=0)


def _stack(parts: list[np.ndarray], plan: MmdPlan | None) -> np.ndarray:
    if parts:
        return np.concatenate(parts)
    return np.zeros((0, 0 if plan is None else len(plan.center)), dtype=np.float32)


def _smallest(rows: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    if len(keys) <= k:
        return rows, keys
    keep = np.sort(np.argpartition(keys, k)[:k])
    return rows[keep], keys[keep]


def _merge_moments(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    """Chan et al.'s pairwise update: counts add, means weight, M2 gains the between-part term."""
    if a is None:
        return b
    (na, ma, sa), (nb, mb, sb) = a, b
    n = na + nb
    delta = mb - ma
    mean = ma + delta * np.divide(nb, n, out=np.zeros_like(n), where=n > 0)
    m2 = sa + sb + delta**2 * np.divide(na * nb, n, out=np.zeros_like(n), where=n > 0)
    return np.stack([n, mean, m2])


def merge(a: SideStats, b: SideStats, *, capacity: int, exact_rows: int) -> SideStats:
    """The statistics of both parts together (fan-out: one partial per shard of files)."""
    if a.numeric_names != b.numeric_names or set(a.categories) != set(b.categories):
        raise InputError("partial statistics", expected=f"features {list(a.numeric_names)}",
                         found=f"{list(b.numeric_names)}")
    per_column = exact_rows if not a.numeric_names else min(exact_rows, (1 << 26) // len(a.numeric_names))
    kept = None
    if a.kept is not None and b.kept is not None and len(a.kept) + len(b.kept) <= a.keep_rows:
        kept = np.concatenate([a.kept, b.kept])
    sample, keys = a.sample, a.sample_keys
    if b.sample is not None and b.sample_keys is not None:
        k = max(len(a.sample_keys) if a.sample_keys is not None else 0, len(b.sample_keys))
        sample, keys = (b.sample, b.sample_keys) if a.sample is None or a.sample_keys is None else _smallest(
            np.concatenate([a.sample, b.sample]), np.concatenate([a.sample_keys, b.sample_keys]), k)
    return SideStats(
        rows=a.rows + b.rows, numeric_names=a.numeric_names,
        sketches=[merge_sketches(x, y, capacity=capacity, exact_rows=per_column)
                  for x, y in zip(a.sketches, b.sketches, strict=True)],
        nan=a.nan + b.nan,
        categories={n: dict(Counter(a.categories[n]) + Counter(b.categories[n])) for n in a.categories},
        missing={n: a.missing[n] + b.missing[n] for n in a.missing},
        coverage=None if a.coverage is None or b.coverage is None else a.coverage + b.coverage,
        rff_sum=_add(a.rff_sum, b.rff_sum), mmd_rows=a.mmd_rows + b.mmd_rows, kept=kept, keep_rows=a.keep_rows,
        moments=b.moments if a.moments is None else a.moments if b.moments is None else _merge_moments(
            a.moments, b.moments),
        sample=sample, sample_keys=keys,
        id_selection={n: dict(Counter(a.id_selection.get(n, {})) + Counter(b.id_selection.get(n, {})))
                      for n in set(a.id_selection) | set(b.id_selection)})


def _add(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return b if a is None else a if b is None else a + b


# ---- partial statistics as a file (the fan-out's artifact): a JSON header plus arrays, no pickles

PARTIAL_SCHEMA = "skewgate.drift-partial"


def save_partial(stats: SideStats, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"schema": PARTIAL_SCHEMA, "version": 1, "rows": stats.rows, "numeric_names": list(stats.numeric_names),
              "categories": stats.categories, "missing": stats.missing, "mmd_rows": stats.mmd_rows,
              "keep_rows": stats.keep_rows, "extra": stats.extra,
              "sketches": [{"n": s.n, "complete": s.complete, "raw": s.lower is None} for s in stats.sketches]}
    arrays: dict[str, Any] = {"header": np.array(json.dumps(header)), "nan": stats.nan}
    for name in ("coverage", "rff_sum", "kept", "moments", "sample", "sample_keys"):
        value = getattr(stats, name)
        if value is not None:
            arrays[name] = value
    arrays |= sketch_arrays(stats.sketches)
    with path.open("wb") as handle:
        np.savez_compressed(handle, **arrays)
    return path


def load_partial(path: str | Path) -> SideStats:
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {name: archive[name] for name in archive.files}
        header = json.loads(str(data["header"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(path, expected="skewgate partial drift statistics",
                         found=f"{type(err).__name__}: {err}") from err
    if header.get("schema") != PARTIAL_SCHEMA:
        raise InputError(path, field="schema", expected=PARTIAL_SCHEMA, found=str(header.get("schema")))
    return SideStats(
        rows=header["rows"], numeric_names=tuple(header["numeric_names"]),
        sketches=sketches_from(data, header["sketches"]), nan=data["nan"], categories=header["categories"],
        missing=header["missing"], coverage=data.get("coverage"), rff_sum=data.get("rff_sum"),
        mmd_rows=header["mmd_rows"], kept=data.get("kept"), keep_rows=header["keep_rows"],
        moments=data.get("moments"), sample=data.get("sample"), sample_keys=data.get("sample_keys"),
        extra=header.get("extra", {}))


def sketch_arrays(sketches: list[QuantileSketch]) -> dict[str, np.ndarray]:
    arrays = {f"sketch_values_{j}": s.values for j, s in enumerate(sketches)}
    for j, s in enumerate(sketches):
        if s.lower is not None and s.upper is not None:
            arrays[f"sketch_lower_{j}"], arrays[f"sketch_upper_{j}"] = s.lower, s.upper
    return arrays


def sketches_from(data: dict[str, np.ndarray], meta: list[dict[str, Any]]) -> list[QuantileSketch]:
    return [QuantileSketch(values=data[f"sketch_values_{j}"], lower=data.get(f"sketch_lower_{j}"),
                           upper=data.get(f"sketch_upper_{j}"), n=int(m["n"]), complete=bool(m["complete"]))
            for j, m in enumerate(meta)]
