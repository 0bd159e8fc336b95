"""A data set's files: one Parquet/CSV file, a directory (Hive-partitioned or not), a glob, on local disk or an
object store (`s3://…`, `gs://…` through pyarrow's filesystems), listed in one sorted order, and their joint SHA-256.
Drift's sources and the estimate's inputs read snapshots through it, so a fan-out shard (every `shards`-th file)
means the same files to both, and a snapshot has one digest.

An S3 endpoint comes from `AWS_ENDPOINT_URL` and credentials from the usual AWS variables.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file

if TYPE_CHECKING:
    import pyarrow.fs as pafs

TABLE_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}

def snapshot_sha256(location: str, files: Sequence[str], filesystem: pafs.FileSystem | None = None) -> str:
    """A single local file's SHA-256; for several files (or any on an object store), the SHA-256 of their names,
    relative to the location, and SHA-256s."""
    if filesystem is None and len(files) == 1:
        return sha256_file(files[0])
    lines = [f"{relative_name(f, root_of(location))}\0{_file_sha256(f, filesystem)}\n" for f in sorted(files)]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _file_sha256(path: str, filesystem: pafs.FileSystem | None) -> str:
    if filesystem is None:
        return sha256_file(path)
    digest = hashlib.sha256()
    with filesystem.open_input_stream(path) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def resolve(location: str, files: Sequence[str] = ()) -> tuple[pafs.FileSystem | None, list[str], bool]:
    """(filesystem or None for local, the files, whether the location is a directory to read as Hive)."""
    if "://" in location:
        filesystem, root = filesystem_of(location)
        import pyarrow.fs as pafs

        info = filesystem.get_file_info(root)
        if info.type == pafs.FileType.NotFound:
            raise InputError(location, expected="a Parquet/CSV file, directory or glob", found="no such path")
        if files:
            return filesystem, list(files), False
        if info.type == pafs.FileType.Directory:
            listed = filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
            return filesystem, sorted(i.path for i in listed if i.type == pafs.FileType.File
                                      and not Path(i.path).name.startswith(("_", "."))), True
        return filesystem, [root], False
    if files:
        return None, list(files), False
    path = Path(location)
    if any(ch in location for ch in "*?["):
        matched = sorted(p for p in glob.glob(location, recursive=True) if Path(p).is_file())
        if not matched:
            raise InputError(location, expected="a glob matching Parquet/CSV files", found="no match")
        return None, matched, False
    if path.is_dir():
        found = sorted(str(p) for p in path.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))
        if not found:
            raise InputError(location, expected="a directory with Parquet/CSV files", found="no files")
        return None, found, True
    if not path.is_file():
        raise InputError(location, expected="a Parquet/CSV file, directory, glob or .npz", found="no such file")
    return None, [str(path)], False


def filesystem_of(uri: str) -> tuple[pafs.FileSystem, str]:
    import pyarrow as pa
    import pyarrow.fs as pafs

    if uri.startswith("s3://") and os.environ.get("AWS_ENDPOINT_URL"):
        endpoint = os.environ["AWS_ENDPOINT_URL"]
        scheme, _, host = endpoint.partition("://")
        filesystem = pafs.S3FileSystem(endpoint_override=host or scheme, scheme=scheme if host else "https",
                                       region=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
        return filesystem, uri[len("s3://"):]
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError) as err:  # ArrowInvalid: unknown scheme; OSError: no host, no credentials
        raise InputError(uri, expected="a URI pyarrow can open (s3://, gs://, hdfs://, file://)",
                         found=f"{type(err).__name__}: {err}") from err


def root_of(location: str) -> str:
    """The folder that file names are relative to: a directory itself, a glob's part before its wildcards."""
    wildcard = min((location.find(ch) for ch in "*?[" if ch in location), default=-1)
    return location if wildcard < 0 else location[:wildcard].rsplit("/", 1)[0]


def fs_path(root: str, filesystem: pafs.FileSystem | None) -> str:
    return root.rstrip("/") if filesystem is not None else str(Path(root))


def relative_name(path: str, location: str) -> str:
    root = location.split("://")[-1].rstrip("/")
    root = root if "://" in location else str(Path(root))
    return path[len(root) + 1:] if path.startswith(root + "/") else Path(path).name
