"""Drift inputs, read in record batches: a Parquet or CSV file, a directory (Hive-partitioned or not), a glob, on
local disk or an object store (`s3://…`, `gs://…` through pyarrow's filesystems), or an `.npz` of arrays.

Partition keys of a Hive layout (`date=2026-12-01/`) say where rows were written, not what the model saw, so
they are not features. An S3 endpoint comes from `AWS_ENDPOINT_URL` and credentials from the usual AWS
variables. Memory is bounded by a batch (`batch_rows` rows, fewer for wide data: `BATCH_BYTES`) and one Parquet
row group (an `.npz` is read whole: it holds arrays, not logs).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import load_npz
from skewgate.common.snapshot import TABLE_SUFFIXES, fs_path, relative_name, resolve, root_of, snapshot_sha256
from skewgate.drift.stats.periods import Period, PeriodRows, labels

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

# Rows per batch, at most `BATCH_BYTES` of float32 features: large batches for a few features (each batch is a
# sorted chunk merged into every feature's sketch: 262,144 rows ran 8M x 4 in 0.6-0.8x the time of 65,536, with a
# smaller KS error bound), fewer rows for wide data (512 features: 32,768)
BATCH_ROWS = 262_144
BATCH_BYTES = 64 << 20


@dataclass(frozen=True)
class Batch:
    """Rows of one file: numeric features as float32 (NaN for missing), categorical columns as Arrow arrays
    (`None` for missing); `arrays` holds an `.npz`'s arrays for embedding."""

    origin: str  # the file the rows come from (seeds per-file randomness, so a split run draws the same)
    numeric: np.ndarray
    categorical: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    pooled: dict[int, np.ndarray] = field(default_factory=dict)  # feature index → all its values (N-D arrays)

    @property
    def rows(self) -> int:
        return int(self.numeric.shape[0])  # a (rows × 0) matrix when every feature is categorical


class Source:
    """One input data set. `dtypes` keeps the table's column order; numeric columns are the int/float ones."""

    def __init__(self, location: str, *, files: Sequence[str] = (), feature_axes: Mapping[str, int] | None = None,
                 ids: Collection[str] = (), exclude: Collection[str] = (), rows_of: PeriodRows | None = None) -> None:
        self.location = location
        self.feature_axes = dict(feature_axes or {})
        self.ids = set(ids)
        self.exclude = set(exclude)  # columns that are not features (a timestamp)
        self.rows_of = rows_of  # only the rows of this period (a periodic profile's reference)
        self.positions: dict[str, int] = {}
        self._axes: dict[str, int] = {}
        self._npz: dict[str, np.ndarray] | None = None
        self._dataset: ds.Dataset | None = None
        self._filesystem: pafs.FileSystem | None = None
        self._sha256: Future[str] | None = None
        if location.lower().endswith(".npz") and "://" not in location:
            if rows_of is not None or self.exclude:
                raise InputError(location, expected="a table with a timestamp column (for --timestamp/--period)",
                                 found="an .npz of arrays")
            self._open_npz(Path(location))
        else:
            self._open_table(location, files)

    # ---- opening
    def _open_npz(self, path: Path) -> None:
        """2-D arrays: one feature per column. Higher ranks: one feature per position of the feature axis,
        pooling every other position (an image's pixels, a sequence's steps). Id arrays: one categorical."""
        arrays = load_npz(path)
        rows = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
        if len(rows) != 1 or 0 in rows:
            raise InputError(path, expected="arrays with one shared, non-zero number of rows",
                             found=f"rows {sorted(rows)}")
        names: list[str] = []
        self.dtypes: dict[str, str] = {}
        categorical = []
        for name, array in arrays.items():
            if array.dtype.kind not in "biuf":
                raise InputError(path, field=name, expected="a numeric array", found=f"dtype {array.dtype}")
            if name in self.ids:
                _check_ids(path, name, array.dtype)
                categorical.append(name)
                self.dtypes[name] = "int64"  # compared as in a table: ids of any integer width
                continue
            if array.ndim > 2:
                axis = feature_axis(name, array.shape, self.feature_axes)
                self._axes[name] = axis
                columns = [f"{name}[{i}]" for i in range(array.shape[axis])]
                self.positions.update(dict.fromkeys(columns, int(np.prod(array.shape[1:])) // array.shape[axis]))
            else:
                columns = [name] if array.ndim == 1 else [f"{name}[{i}]" for i in range(array.shape[1])]
            names += columns
            self.dtypes.update(dict.fromkeys(columns, "float64"))  # any width: read as float32, compared as a table
        self._npz = arrays
        self.numeric_names: tuple[str, ...] = tuple(names)
        self.categorical_names: tuple[str, ...] = tuple(categorical)
        self.files: tuple[str, ...] = (str(path),)
        self._rows = next(iter(rows))

    def _open_table(self, location: str, files: Sequence[str]) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        import pyarrow.dataset as ds

        filesystem, paths, partitioning = resolve(location, files)
        suffixes = {Path(p).suffix.lower() for p in paths}
        formats = {TABLE_SUFFIXES.get(s) for s in suffixes}
        if len(formats) != 1 or None in formats:
            raise InputError(location, expected="Parquet (.parquet/.pq) or CSV (.csv) files of one kind",
                             found=f"suffixes {sorted(suffixes)}")
        kind = formats.pop()
        # as pandas reads CSV: an empty field is missing, whatever the column's type
        file_format: Any = kind if kind == "parquet" else ds.CsvFileFormat(
            convert_options=pacsv.ConvertOptions(strings_can_be_null=True))

        def make(schema: pa.Schema | None = None) -> ds.Dataset:
            if partitioning:  # a directory: let pyarrow discover it, parsing `key=value/` folders
                root = location.split("://", 1)[1] if "://" in location else location
                return ds.dataset(fs_path(root, filesystem), format=file_format, filesystem=filesystem,
                                  partitioning="hive", schema=schema)
            return ds.dataset(list(paths), format=file_format, filesystem=filesystem, schema=schema)

        try:
            dataset = make()
            fragments = list(dataset.get_fragments())
            # each file's own types (pyarrow takes the first file's for the data set): a column read as int64 in
            # one CSV and float64 in another is read as float64 from all of them
            physical_schemas = [(f.path, f.physical_schema) for f in fragments]
            physical = set(physical_schemas[0][1].names) if fragments else set(dataset.schema.names)
            unified = unify_types(physical_schemas)
            changed = [i for i, f in enumerate(dataset.schema) if f.name in unified and unified[f.name] != f.type]
            if changed:
                schema = dataset.schema
                for i in changed:
                    schema = schema.set(i, schema.field(i).with_type(unified[schema.field(i).name]))
                dataset = make(schema)
                fragments = list(dataset.get_fragments())
        except (pa.ArrowException, OSError) as err:  # ArrowInvalid for a corrupt file, OSError for an unreadable one
            raise InputError(location, expected="readable Parquet/CSV files",
                             found=f"{type(err).__name__}: {err}") from err
        schema = dataset.schema
        self._dataset, self._filesystem = dataset, filesystem
        self.files = tuple(f.path for f in fragments)
        # partition keys are in the data set's schema but in no file; numeric features are compared as float64
        # whatever width each side was written with (they are read as float32 either way)
        self.columns = {f.name for f in schema if f.name in physical}
        missing = sorted(self.exclude - self.columns)
        if missing:
            raise InputError(location, field=missing[0], expected="a column of the data (named by --timestamp)",
                             found=f"columns {sorted(self.columns)[:10]}")
        self.dtypes = {f.name: _schema_dtype(f.type, id_column=f.name in self.ids) for f in schema
                       if f.name in physical and f.name not in self.exclude}
        for name in self.ids:
            if name in self.dtypes:
                dtype = self.dtypes[name]
                _check_ids(location, name, dtype if dtype in ("object", "category") else np.dtype(dtype))
        self.numeric_names = tuple(f.name for f in schema if f.name in self.dtypes and _is_numeric(f.type)
                                   and f.name not in self.ids)
        self.categorical_names = tuple(n for n in self.dtypes if n not in self.numeric_names)
        self._rows = -1

    @property
    def layout(self) -> dict[str, Any]:
        """How the features were read, so that the other side is read the same way (kept in the profile)."""
        return {"feature_axes": dict(self._axes), "ids": sorted(self.ids), "positions": dict(self.positions),
                "exclude": sorted(self.exclude)}

    # ---- reading
    def count_rows(self) -> int:
        if self._rows < 0 and self.rows_of is not None:  # one period's rows: counted from the timestamps
            self._rows = self.period_counts(self.rows_of.column, self.rows_of.period)[self.rows_of.label]
        if self._rows < 0:
            assert self._dataset is not None
            self._rows = int(self._dataset.count_rows())  # Parquet: from the footers, no data read
        return self._rows

    def period_counts(self, column: str, period: Period) -> Counter[str]:
        """Rows per period label of the whole data set, from its `column` alone."""
        if self._dataset is None or column not in self.columns:
            raise InputError(self.location, field=column, expected="a timestamp column (--timestamp)",
                             found="no such column" if self._dataset is not None else "an .npz of arrays")
        counts: Counter[str] = Counter()
        for fragment in self._dataset.get_fragments():
            for record in self._records(fragment, [column], BATCH_ROWS):
                counts.update(labels(record.column(column), period=period, name=column, source=fragment.path))
        return counts

    def batches(self, *, batch_rows: int = BATCH_ROWS) -> Iterator[Batch]:
        self._hash_ahead()
        batch_rows = max(1, min(batch_rows, BATCH_BYTES // (4 * max(1, len(self.numeric_names)))))
        if self._npz is not None:
            yield from self._npz_batches(batch_rows)
            return
        assert self._dataset is not None
        columns = list(self.dtypes)
        if self.rows_of is not None:
            columns.append(self.rows_of.column)
        for fragment in self._dataset.get_fragments():
            origin = relative_name(fragment.path, root_of(self.location))
            for record in self._records(fragment, columns, batch_rows):
                if self.rows_of is not None:
                    rows_of = self.rows_of
                    record = record.filter(labels(record.column(rows_of.column), period=rows_of.period,
                                                  name=rows_of.column, source=fragment.path) == rows_of.label)
                if record.num_rows:
                    yield self._to_batch(record, origin)

    def _records(self, fragment: ds.Fragment, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
        """Parquet one row group at a time (pyarrow's scanners read ahead across row groups, so their memory
        grows with the file); CSV through the scanner, without read-ahead."""
        if fragment.path.lower().endswith((".parquet", ".pq")):
            import pyarrow.parquet as pq

            handle = self._filesystem.open_input_file(fragment.path) if self._filesystem else fragment.path
            parquet = pq.ParquetFile(handle)
            for group in range(parquet.metadata.num_row_groups):
                yield from parquet.read_row_group(group, columns=columns).to_batches(max_chunksize=batch_rows)
            return
        yield from fragment.to_batches(columns=columns, batch_size=batch_rows, batch_readahead=0,
                                       fragment_readahead=0)

    def _to_batch(self, record: pa.RecordBatch, origin: str) -> Batch:
        numeric = np.empty((record.num_rows, len(self.numeric_names)), dtype=np.float32)
        for j, name in enumerate(self.numeric_names):
            column = record.column(name)
            numeric[:, j] = column.to_numpy(zero_copy_only=False) if column.null_count == 0 else \
                column.cast("double").fill_null(float("nan")).to_numpy()
        return Batch(origin=origin, numeric=numeric,
                     categorical={n: record.column(n) for n in self.categorical_names})

    def _npz_batches(self, batch_rows: int) -> Iterator[Batch]:
        """Pooled features: `numeric` holds each sample's mean over the positions (what MMD compares),
        `pooled` every value (what KS, NaN share and coverage see)."""
        assert self._npz is not None
        origin = Path(self.location).name
        for start in range(0, self._rows, batch_rows):
            parts = {name: a[start:start + batch_rows] for name, a in self._npz.items()}
            blocks: list[np.ndarray] = []
            pooled: dict[int, np.ndarray] = {}
            categorical: dict[str, Any] = {}
            for name, part in parts.items():
                if name in self.categorical_names:
                    categorical[name] = part.reshape(-1)
                elif name in self._axes:
                    channels = part.shape[self._axes[name]]
                    values = np.moveaxis(part, self._axes[name], -1).reshape(len(part), -1, channels)
                    values = values.astype(np.float32, copy=False)
                    offset = sum(b.shape[1] for b in blocks)
                    pooled |= {offset + c: values[:, :, c].reshape(-1) for c in range(values.shape[2])}
                    with np.errstate(all="ignore"):
                        blocks.append(np.nanmean(values, axis=1) if np.isnan(values).any() else values.mean(axis=1))
                else:
                    blocks.append(part.reshape(len(part), -1) if part.ndim > 1 else part[:, None])
            # one array of features (the usual case) is used as it is: concatenating would copy the whole batch
            numeric = (blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1) if blocks
                       else np.zeros((len(next(iter(parts.values()))), 0)))
            yield Batch(origin=origin, numeric=numeric.astype(np.float32, copy=False), categorical=categorical,
                        arrays=parts, pooled=pooled)

    # ---- identity
    def sha256(self) -> str:
        """A single file's SHA-256; for several files, the SHA-256 of their names and SHA-256s."""
        self._hash_ahead()
        assert self._sha256 is not None
        return self._sha256.result()

    def _hash_ahead(self) -> None:
        """Start hashing the files in a thread, once: hashlib releases the GIL, so on two cores the hash (a
        quarter of the 8M-row gate's time when it came after the passes) overlaps the reading."""
        if self._sha256 is None:
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skewgate-sha256")
            self._sha256 = pool.submit(snapshot_sha256, self.location, self.files, self._filesystem)
            pool.shutdown(wait=False)  # the one task runs on; the pool takes no other

    def __repr__(self) -> str:
        return f"Source({self.location!r}, {len(self.files)} files)"


def open_source(location: str | Path, *, files: Sequence[str] = (), feature_axes: Mapping[str, int] | None = None,
                ids: Collection[str] = (), exclude: Collection[str] = (), rows_of: PeriodRows | None = None) -> Source:
    """`files`: read only these files of the data set (a fan-out shard). `feature_axes`: an N-D array's feature
    axis by name (default per layout: `feature_axis`). `ids`: integer columns/arrays that are ids (categories).
    `exclude`: columns that are not features (a timestamp). `rows_of`: only the rows of one period."""
    return Source(str(location), files=files, feature_axes=feature_axes, ids=ids, exclude=exclude, rows_of=rows_of)


def feature_axis(name: str, shape: tuple[int, ...], declared: Mapping[str, int]) -> int:
    """The declared axis, else: 4-D channels-last when the last axis is small (≤ 4) and the second is not
    (NHWC), else channels-first (NCHW); 3-D and 5-D+: the last axis (a sequence's features)."""
    if name in declared:
        axis = declared[name] % len(shape)
        if axis == 0:
            raise InputError(name, field="feature axis", expected="an axis other than 0 (the rows)", found="0")
        return axis
    if len(shape) == 4:
        return 3 if shape[3] <= 4 < shape[1] else 1
    return len(shape) - 1


def _check_ids(source: str | Path, name: str, dtype: np.dtype | str) -> None:
    """Ids are integers, or (in a table) strings; a float column is a number, not an id."""
    if isinstance(dtype, str) and dtype in ("object", "category", "string", "large_string"):
        return
    if not isinstance(dtype, np.dtype) or dtype.kind not in "iu":
        raise InputError(source, field=name, expected="an integer or string column of ids", found=f"dtype {dtype}")


def arrow_dtype(arrow_type: pa.DataType) -> str:
    """The numpy/pandas name of an Arrow type, as the schema check compares them (`float64`, `int64`, `object`)."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return "category"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "object"
    try:
        return str(np.dtype(arrow_type.to_pandas_dtype()))
    except (NotImplementedError, TypeError):
        return str(arrow_type)


def _schema_dtype(arrow_type: pa.DataType, *, id_column: bool) -> str:
    """The dtype a column is compared by across data sets: `float64` for every int/float feature (int64 in one
    file and float64 in another, or float32 on one side, are the same feature), `int64` for integer ids, else
    `arrow_dtype`."""
    import pyarrow as pa

    if id_column:
        return "int64" if pa.types.is_integer(arrow_type) else arrow_dtype(arrow_type)
    return "float64" if _is_numeric(arrow_type) else arrow_dtype(arrow_type)


def unify_types(schemas: Sequence[tuple[str, pa.Schema]]) -> dict[str, pa.DataType]:
    """Column → the one type it is read as from every file of a data set: a type all files agree on; float64
    for numeric types that differ only in width or int/float; a column with no value in a file (Arrow's null
    type) takes the others' type. A number in one file and text in another is an `InputError` naming the file,
    the column and both types: that is not a width, and coercing it would hide a broken writer."""
    import pyarrow as pa

    first: dict[str, tuple[str, pa.DataType]] = {}
    unified: dict[str, pa.DataType] = {}
    for path, schema in schemas:
        for column in schema:
            kind = column.type
            if pa.types.is_null(kind):
                continue
            if column.name not in first:
                first[column.name] = (path, kind)
                unified[column.name] = kind
                continue
            seen_in, seen = first[column.name]
            if kind == unified[column.name]:
                continue
            if _is_numeric(kind) and _is_numeric(unified[column.name]):
                unified[column.name] = pa.float64()
                continue
            raise InputError(path, field=column.name, expected=f"type {seen}, as in {seen_in}",
                             found=f"type {kind}; numbers and text are not coerced into one another: fix the "
                                   "file that wrote the other type")
    return unified


def _is_numeric(arrow_type: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type))
