"""The model's inputs in batches, from an `.npz` of arrays named like the model's inputs or from one Parquet/CSV
file whose `features` columns, in that order, are the model's one input (rows × features). `features` name table
columns only: a reference kept as `.npz` beside serving logs in Parquet is one estimate.

An `.npz` is read whole (it holds arrays, not logs); a table is read in record batches of `batch_rows`, so that
the current side of an estimate needs memory for one batch whatever the file's rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import TensorSpec, load_npz


@dataclass(frozen=True)
class Inputs:
    """One data set the model runs on: where it is, what the model expects, how its rows are read."""

    path: Path
    specs: Sequence[TensorSpec]
    features: Sequence[str] = ()
    batch_rows: int = 65_536

    @property
    def format(self) -> str:
        """npz, parquet or csv: by the file's first bytes (a KFP artifact's path has no suffix), then its suffix;
        a file that is neither zip nor Parquet is read as CSV when it has a .csv suffix or --features name columns."""
        if not self.path.is_file():
            raise InputError(self.path, expected="an .npz, Parquet or CSV file", found="no such file")
        with self.path.open("rb") as file:
            magic = file.read(4)
        if magic == b"PK\x03\x04":
            return "npz"
        if magic == b"PAR1":
            return "parquet"
        if self.path.suffix.lower() == ".csv" or (self.features and not self.path.suffix):
            return "csv"
        raise InputError(self.path, expected="an .npz of arrays, or a Parquet or CSV file (CSV: a .csv suffix, or "
                         "--features naming its columns)", found=f"suffix {self.path.suffix!r}, first bytes {magic!r}")

    @property
    def is_table(self) -> bool:
        return self.format != "npz"

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        """The model's feeds, `batch_rows` samples at a time."""
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
            yield {s.name: arrays[s.name][start:start + self.batch_rows] for s in self.specs}

    def column(self, name: str) -> np.ndarray:
        """One array of an `.npz` (or one column of a table), whole: the labels travelling beside the inputs."""
        if not self.is_table:
            arrays = load_npz(self.path)
            if name not in arrays:
                raise InputError(self.path, field=name, expected=f"a `{name}` array of labels (or --labels)",
                                 found=f"arrays {sorted(arrays)}")
            return arrays[name]
        table = self._dataset()
        if name not in table.schema.names:
            raise InputError(self.path, field=name, expected=f"a `{name}` column of labels (or --labels)",
                             found=f"columns {table.schema.names}")
        return np.asarray(table.to_table(columns=[name]).column(0).to_numpy())

    def _dataset(self) -> Any:  # a pyarrow Dataset (pyarrow has no type hints)
        import pyarrow.dataset as ds

        kind = self.format
        try:
            return ds.dataset(str(self.path), format=kind)
        except Exception as err:  # pyarrow's ArrowInvalid and friends: all mean "not a table of that kind"
            raise InputError(self.path, expected=f"a {kind} file", found=f"unreadable ({err})") from err

    def _table_batches(self) -> Iterator[dict[str, np.ndarray]]:
        import pyarrow as pa

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
        dataset = self._dataset()
        missing = [f for f in self.features if f not in dataset.schema.names]
        if missing:
            raise InputError(self.path, field="--features", expected=f"columns {list(self.features)}",
                             found=f"no column {missing} (columns: {dataset.schema.names})")
        for batch in dataset.to_batches(columns=list(self.features), batch_size=self.batch_rows):
            if not batch.num_rows:
                continue
            try:  # a null is NaN, as the model would receive a missing value
                columns = [batch.column(i).cast(pa.float64()).to_numpy(zero_copy_only=False)
                           for i in range(batch.num_columns)]
            except pa.ArrowInvalid as err:
                raise InputError(self.path, field="--features", expected="numeric feature columns",
                                 found=str(err)) from err
            yield {spec.name: np.stack(columns, axis=1).astype(spec.dtype)}
