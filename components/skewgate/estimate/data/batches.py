"""The model's inputs in batches, from an `.npz` of arrays named like the model's inputs or from Parquet/CSV
whose `features` columns, in that order, are the model's one input (rows × features): one file, or a snapshot
drift reads (a directory, Hive-partitioned or not, a glob, an object store URI; `common.snapshot`). `features`
name table columns only: a reference kept as `.npz` beside serving logs in Parquet is one estimate.

An `.npz` is read whole (it holds arrays, not logs); a table is read in record batches of `batch_rows`, file by
file in the snapshot's order, so that the current side of an estimate needs memory for one batch whatever the
rows. `files` restricts a snapshot to some of its files (a fan-out shard).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec, load_npz
from skewgate.common.snapshot import TABLE_SUFFIXES, relative_name, resolve, root_of, snapshot_sha256


@dataclass(frozen=True)
class Inputs:
    """One data set the model runs on: where it is, what the model expects, how its rows are read."""

    path: Path | str  # a file, or a snapshot's directory, glob or URI (a str keeps a URI's `//`)
    specs: Sequence[TensorSpec]
    features: Sequence[str] = ()
    batch_rows: int = 65_536
    files: Sequence[str] = ()  # only these of the snapshot's files (a shard); empty: all

    @property
    def single_file(self) -> bool:
        """A local file (an `.npz`, or a table however named), not a snapshot of files; a shard of it is itself."""
        local = "://" not in str(self.path) and Path(self.path).is_file()
        return local and list(self.files) in ([], [str(self.path)])

    @property
    def format(self) -> str:
        """npz, parquet or csv. One local file: by its first bytes (a KFP artifact's path has no suffix), then its
        suffix; a file that is neither zip nor Parquet is read as CSV when it has a .csv suffix or --features name
        columns. A snapshot of several files: by their suffixes, one kind for all."""
        if not self.single_file:
            kinds = {TABLE_SUFFIXES.get(Path(f).suffix.lower()) for f in self.listed()[1]}
            if len(kinds) != 1 or None in kinds:
                raise InputError(self.path, expected="an .npz file, or Parquet (.parquet/.pq) or CSV (.csv) files "
                                 "of one kind", found=f"suffixes {sorted({Path(f).suffix for f in self.listed()[1]})}")
            return str(kinds.pop())
        path = Path(self.path)
        with path.open("rb") as file:
            magic = file.read(4)
        if magic == b"PK\x03\x04":
            return "npz"
        if magic == b"PAR1":
            return "parquet"
        if path.suffix.lower() == ".csv" or (self.features and not path.suffix):
            return "csv"
        raise InputError(self.path, expected="an .npz of arrays, or a Parquet or CSV file (CSV: a .csv suffix, or "
                         "--features naming its columns)", found=f"suffix {path.suffix!r}, first bytes {magic!r}")

    def listed(self) -> tuple[Any, list[str]]:
        """(the pyarrow filesystem, None for local files; the files read, in the snapshot's order)."""
        filesystem, paths, _ = resolve(str(self.path), self.files)
        return filesystem, paths

    def sha256(self) -> str:
        """One file's SHA-256; a snapshot's over its files' names and SHA-256s (as drift records it)."""
        if self.single_file:
            return snapshot_sha256(str(self.path), [str(self.path)])
        return snapshot_sha256(str(self.path), *reversed(self.listed()))

    @property
    def is_table(self) -> bool:
        return self.format != "npz"

    def batches(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """(the file the rows come from, relative to the snapshot, empty for a single file; the model's feeds),
        `batch_rows` samples at a time. The file seeds the estimate's draws, so a shard draws what one pass does."""
        if self.is_table:
            yield from self._table_batches()
            return
        arrays = load_npz(self.path, expected=self.specs)
        rows = {len(arrays[s.name]) for s in self.specs}
        if len(rows) != 1:
            raise InputError(self.path, expected="as many samples in every model input",
                             found=", ".join(f"{s.name}: {len(arrays[s.name])}" for s in self.specs))
        total = rows.pop()
        for start in range(0, total, self.batch_rows):
            yield "", {s.name: arrays[s.name][start:start + self.batch_rows] for s in self.specs}

    def row_counts(self) -> dict[str, int]:
        """Rows per file, by its name relative to the snapshot ("" for one file): from a Parquet file's footer
        (a CSV is read to count them), an `.npz`'s inputs' length."""
        if not self.is_table:
            arrays = load_npz(self.path, expected=self.specs)
            return {"": len(arrays[self.specs[0].name])}
        return {origin: int(dataset.count_rows()) for origin, _, dataset in self._tables()}

    def column(self, name: str) -> np.ndarray:
        """One array of an `.npz` (or one column of a table), whole: the labels travelling beside the inputs."""
        if not self.is_table:
            arrays = load_npz(self.path)
            if name not in arrays:
                raise InputError(self.path, field=name, expected=f"a `{name}` array of labels (or --labels)",
                                 found=f"arrays {sorted(arrays)}")
            return arrays[name]
        parts = []
        for _, path, table in self._tables():
            if name not in table.schema.names:
                raise InputError(path, field=name, expected=f"a `{name}` column of labels (or --labels)",
                                 found=f"columns {table.schema.names}")
            parts.append(np.asarray(table.to_table(columns=[name]).column(0).to_numpy()))
        return np.concatenate(parts)

    def _tables(self) -> Iterator[tuple[str, str, Any]]:  # pyarrow Datasets (pyarrow has no type hints)
        """(the file's name relative to the snapshot, empty for a single file; its path; its data set), file by
        file. The snapshot is listed once; each file is read with its own types (a column of ints in one CSV and
        floats in the next is numeric in both)."""
        import pyarrow.dataset as ds

        kind = self.format
        if self.single_file:
            filesystem, paths, root = None, [str(self.path)], None
        else:
            (filesystem, paths), root = self.listed(), root_of(str(self.path))
        for path in paths:
            try:
                dataset = ds.dataset(path, format=kind, filesystem=filesystem)
            except Exception as err:  # pyarrow's ArrowInvalid and friends: all mean "not a table of that kind"
                raise InputError(path, expected=f"a {kind} file", found=f"unreadable ({err})") from err
            yield ("" if root is None else relative_name(path, root)), path, dataset

    def _table_batches(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        if len(self.specs) != 1 or len(self.specs[0].shape) != 2:
            raise InputError(self.path, expected="a model with one (rows × features) input to read a table into",
                             found="inputs " + ", ".join(f"{s.name} {s.describe()}" for s in self.specs))
        spec = self.specs[0]
        if not self.features:
            raise InputError(self.path, field="--features", expected="the columns that are the model's input "
                             f"`{spec.name}`, in order", found="none given")
        width = spec.shape[1]
        if width is not None and width != len(self.features):
            raise InputError(self.path, field="--features", expected=f"{width} columns (input `{spec.name}` "
                             f"{spec.describe()})", found=f"{len(self.features)}: {list(self.features)}")
        for origin, path, dataset in self._tables():
            missing = [f for f in self.features if f not in dataset.schema.names]
            if missing:
                raise InputError(path, field="--features", expected=f"columns {list(self.features)}",
                                 found=f"no column {missing} (columns: {dataset.schema.names})")
            for batch in dataset.to_batches(columns=list(self.features), batch_size=self.batch_rows):
                if batch.num_rows:
                    yield origin, {spec.name: self._matrix(batch, spec)}

    def _matrix(self, batch: Any, spec: TensorSpec) -> np.ndarray:
        import pyarrow as pa

        try:  # a null is NaN, as the model would receive a missing value
            columns = [batch.column(i).cast(pa.float64()).to_numpy(zero_copy_only=False)
                       for i in range(batch.num_columns)]
        except pa.ArrowInvalid as err:
            raise InputError(self.path, field="--features", expected="numeric feature columns",
                             found=str(err)) from err
        return np.stack(columns, axis=1).astype(spec.dtype)
