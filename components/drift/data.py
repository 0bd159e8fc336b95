"""Drift inputs: a table of named features (Parquet/CSV) or arrays (`.npz`), split into a numeric matrix and
categorical columns, with dtypes for the schema check and the SHA-256 of the file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import load_npz, load_table, sha256_file


@dataclass(frozen=True)
class Features:
    numeric_names: tuple[str, ...]
    numeric: np.ndarray  # rows × numeric features, float32 (NaN kept)
    categorical: dict[str, np.ndarray]  # name → object array of category labels (None for missing)
    dtypes: dict[str, str]
    sha256: str
    source: str

    @property
    def rows(self) -> int:
        return int(self.numeric.shape[0]) if self.numeric_names else len(next(iter(self.categorical.values())))


def load_features(path: str | Path) -> Features:
    path = Path(path)
    if path.suffix.lower() == ".npz":
        return _from_npz(path)
    frame = load_table(path)
    numeric_names, categorical, dtypes = [], {}, {}
    for name in frame.columns:
        column = frame[name]
        dtypes[str(name)] = str(column.dtype)
        if column.dtype.kind in "biuf" and column.dtype.kind != "b":
            numeric_names.append(str(name))
        else:
            categorical[str(name)] = column.astype(object).where(column.notna(), None).to_numpy()
    numeric = frame[numeric_names].to_numpy(dtype=np.float32) if numeric_names else np.zeros((len(frame), 0),
                                                                                              np.float32)
    return Features(tuple(numeric_names), numeric, categorical, dtypes, sha256_file(path), str(path))


def _from_npz(path: Path) -> Features:
    """Every array becomes features: 2-D as columns `name[i]`, higher ranks flattened per row."""
    arrays = load_npz(path)
    names: list[str] = []
    blocks = []
    rows = {a.shape[0] if a.ndim else 0 for a in arrays.values()}
    if len(rows) != 1 or 0 in rows:
        raise InputError(path, expected="arrays with one shared, non-zero number of rows",
                         found=f"rows {sorted(rows)}")
    for name, array in arrays.items():
        if array.dtype.kind not in "biuf":
            raise InputError(path, field=name, expected="a numeric array", found=f"dtype {array.dtype}")
        flat = array.reshape(array.shape[0], -1) if array.ndim > 1 else array[:, None]
        names += [name] if array.ndim == 1 else [f"{name}[{i}]" for i in range(flat.shape[1])]
        blocks.append(flat.astype(np.float32, copy=False))
    dtypes = {}
    for name, array in arrays.items():
        for column in ([name] if array.ndim == 1 else [n for n in names if n.startswith(f"{name}[")]):
            dtypes[column] = str(array.dtype)
    numeric = blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)  # one array: no copy
    return Features(tuple(names), numeric, {}, dtypes, sha256_file(path), str(path))


def check_schema(reference_dtypes: dict[str, str], current: Features, *, reference_source: str) -> None:
    """Missing or extra columns and dtype changes are bad input (the step could not compare like with like)."""
    missing = [c for c in reference_dtypes if c not in current.dtypes]
    extra = [c for c in current.dtypes if c not in reference_dtypes]
    if missing or extra:
        raise InputError(current.source, field="columns",
                         expected=f"the reference's columns ({reference_source})",
                         found=f"missing {missing[:10]}, extra {extra[:10]}")
    for column, dtype in reference_dtypes.items():
        if current.dtypes[column] != dtype:
            raise InputError(current.source, field=column, expected=f"dtype {dtype} (as in the reference)",
                             found=f"dtype {current.dtypes[column]}")
    if current.rows == 0:
        raise InputError(current.source, expected="at least one row", found="none")
