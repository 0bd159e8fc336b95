"""Loaders that check what they load: tensors (`.npz`), tables (Parquet/CSV), ONNX files, file digests, and small
files read whole (evidence, keys) that must be regular files of bounded size.

Every failure is an `InputError` naming the file, the field, what was expected and what was found.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.errors import InputError

if TYPE_CHECKING:
    import onnx


def sha256_file(path: str | Path) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    path = Path(path)
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError as err:
        raise InputError(path, expected="an existing file", found="no such file") from err
    except IsADirectoryError as err:
        raise InputError(path, expected="a file", found="a directory") from err
    return digest.hexdigest()


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def read_regular_file(path: str | Path, *, limit: int, expected: str = "a file") -> bytes:
    """The whole content of a regular file of at most `limit` bytes, else `InputError` naming the file.

    For files whose size nobody vouches for (a verdicts folder, key files): a FIFO, a device, a socket or a
    directory is refused without being read (a FIFO would block forever, `/dev/zero` would fill memory), and the
    limit holds while reading, not only by `st_size` (which is 0 for devices and procfs files). A symbolic link
    is followed only to a regular file: mounted Kubernetes Secrets and hand-assembled folders are links, and what
    counts is what the opened descriptor is. The type is checked before opening (opening some devices acts) and
    again on the opened descriptor (the entry may be swapped in between); the open never blocks (`O_NONBLOCK`).
    `expected` says what the file should have been (`"a verdict JSON file"`); a missing file is an `InputError`
    raised from `FileNotFoundError`.
    """
    path = Path(path)
    try:
        before = os.stat(path)
        if not stat.S_ISREG(before.st_mode):
            raise _not_regular(path, before.st_mode, expected)
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError as err:
        raise InputError(path, expected=expected, found="no such file") from err
    except OSError as err:
        raise InputError(path, expected=expected, found=f"unreadable ({err.strerror or err})") from err
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise _not_regular(path, opened.st_mode, expected)
        if opened.st_size > limit:
            raise InputError(path, expected=f"{expected} of at most {limit} bytes", found=f"{opened.st_size} bytes")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except BlockingIOError as err:
        raise InputError(path, expected=expected, found="a file whose reads would block") from err
    except OSError as err:
        raise InputError(path, expected=expected, found=f"unreadable ({err.strerror or err})") from err
    finally:
        os.close(fd)
    if total > limit:
        raise InputError(path, expected=f"{expected} of at most {limit} bytes", found=f"more than {limit} bytes")
    return b"".join(chunks)


def _not_regular(path: Path, mode: int, expected: str) -> InputError:
    found = _kind(mode)
    if path.is_symlink():
        found = f"a symbolic link to {found} ({os.readlink(path)})"
    return InputError(path, expected=f"{expected} (a regular file)", found=found)


@dataclass(frozen=True)
class TensorSpec:
    """What a model expects of one input: name, dtype and shape (`None` for a dynamic dimension)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]

    def describe(self) -> str:
        dims = ", ".join("N" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


DEFAULT_MAX_NPZ_BYTES = 2 << 30  # decompressed; `$SKEWGATE_MAX_NPZ_BYTES` overrides


def max_npz_bytes() -> int:
    value = os.environ.get("SKEWGATE_MAX_NPZ_BYTES", "")
    if not value:
        return DEFAULT_MAX_NPZ_BYTES
    if not value.isdigit():
        raise InputError("SKEWGATE_MAX_NPZ_BYTES", expected="a number of bytes", found=repr(value))
    return int(value)


def npz_decompressed_bytes(path: Path) -> int:
    """What loading the archive would allocate, from each array's `.npy` header (a compressed archive can
    claim little in its zip directory and inflate to gigabytes): read before anything is decompressed whole."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(member)
            total += int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return total


def load_npz(path: str | Path, *, expected: Sequence[TensorSpec] = (), max_bytes: int | None = None
             ) -> dict[str, np.ndarray]:
    """Load named arrays and check each expected input's presence, dtype, rank and static dimensions.

    Arrays not named in `expected` are kept (labels often travel in the same file) but never fed to a model.
    An archive that would decompress to more than `max_bytes` (default `max_npz_bytes()`) is refused before
    any array is read.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, expected="an .npz file of named arrays", found="no such file")
    limit = max_npz_bytes() if max_bytes is None else max_bytes
    try:
        size = npz_decompressed_bytes(path)
        if size > limit:
            raise InputError(path, expected=f"at most {limit} bytes decompressed (SKEWGATE_MAX_NPZ_BYTES)",
                             found=f"{size} bytes")
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise InputError(path, expected="an .npz file of named arrays", found=f"unreadable ({err})") from err
    if not arrays:
        raise InputError(path, expected="at least one array", found="an empty archive")
    for spec in expected:
        if spec.name not in arrays:
            raise InputError(path, field=spec.name, expected=f"model input {spec.describe()}",
                             found=f"no such array (arrays: {sorted(arrays)})")
        check_array(arrays[spec.name], spec, source=path)
    return arrays


def load_labels(path: str | Path) -> np.ndarray:
    """A `.npy` array of labels (never pickled objects); anything else is an `InputError` naming the file."""
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise InputError(path, expected="a .npy array of labels", found=f"unreadable ({err})") from err
    if not isinstance(values, np.ndarray):
        raise InputError(path, expected="a .npy array of labels", found="an .npz archive")
    return values


def check_array(array: np.ndarray, spec: TensorSpec, *, source: str | Path) -> None:
    """Raise `InputError` unless `array` matches `spec` in dtype, rank, static dimensions, and is non-empty."""
    found = f"{array.dtype}{list(array.shape)}"
    if array.dtype != np.dtype(spec.dtype):
        raise InputError(source, field=spec.name, expected=f"dtype {spec.dtype}", found=f"dtype {array.dtype}")
    if array.ndim != len(spec.shape):
        raise InputError(source, field=spec.name, expected=f"rank {len(spec.shape)} ({spec.describe()})",
                         found=f"rank {array.ndim} ({found})")
    for axis, (want, got) in enumerate(zip(spec.shape, array.shape, strict=True)):
        if want is not None and want != got:
            raise InputError(source, field=spec.name, expected=f"{spec.describe()} (axis {axis} = {want})",
                             found=found)
    if array.size == 0:
        raise InputError(source, field=spec.name, expected="at least one sample", found=found)


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Load and check an ONNX file; a file that is not ONNX, or is truncated, is an `InputError`."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise InputError(path, expected="an ONNX model file", found="no such file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as err:  # protobuf DecodeError, onnx ValidationError, …: all mean "not a valid model"
        raise InputError(path, expected="a valid ONNX model", found=f"{type(err).__name__}: {err}") from err
    if not model.graph.node:
        raise InputError(path, expected="a valid ONNX model", found="a graph with no nodes")
    return model


def onnx_input_specs(model: onnx.ModelProto) -> list[TensorSpec]:
    """The graph inputs that are not initializers, as `TensorSpec`s (symbolic dimensions become `None`)."""
    import onnx

    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)).name
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
        specs.append(TensorSpec(value.name, dtype, shape))
    return specs

