import contextlib
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.common.io import (
    TensorSpec,
    load_npz,
    load_onnx,
    onnx_input_specs,
    read_regular_file,
    sha256_file,
)

SPEC = TensorSpec("pixels", "float32", (None, 1, 8, 8))


def _npz(tmp_path, **arrays):
    path = tmp_path / "x.npz"
    np.savez(path, **arrays)
    return path


def test_loads_arrays_that_match_the_spec(tmp_path):
    path = _npz(tmp_path, pixels=np.zeros((3, 1, 8, 8), np.float32), labels=np.arange(3))
    arrays = load_npz(path, expected=[SPEC])
    assert set(arrays) == {"pixels", "labels"}


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        pytest.param({"image": np.zeros((3, 1, 8, 8), np.float32)},
                     r"x\.npz: pixels: expected model input float32\[N, 1, 8, 8\], found no such array",
                     id="missing-input"),
        pytest.param({"pixels": np.zeros((3, 1, 8, 8), np.float64)},
                     r"pixels: expected dtype float32, found dtype float64", id="wrong-dtype"),
        pytest.param({"pixels": np.zeros((3, 8, 8), np.float32)},
                     r"pixels: expected rank 4 .*, found rank 3", id="wrong-rank"),
        pytest.param({"pixels": np.zeros((3, 1, 8, 9), np.float32)},
                     r"pixels: expected float32\[N, 1, 8, 8\] \(axis 3 = 8\), found float32\[3, 1, 8, 9\]",
                     id="wrong-static-dim"),
        pytest.param({"pixels": np.zeros((0, 1, 8, 8), np.float32)}, r"expected at least one sample",
                     id="empty"),
    ],
)
def test_bad_arrays_name_file_field_expected_and_found(tmp_path, arrays, message):
    with pytest.raises(InputError, match=message):
        load_npz(_npz(tmp_path, **arrays), expected=[SPEC])


@pytest.mark.parametrize(
    "content",
    [pytest.param(b"not a zip", id="not-npz"), pytest.param(None, id="truncated")],
)
def test_unreadable_npz_is_an_input_error(tmp_path, content):
    path = _npz(tmp_path, pixels=np.zeros((3, 1, 8, 8), np.float32))
    data = path.read_bytes()
    path.write_bytes(content if content is not None else data[: len(data) // 2])
    with pytest.raises(InputError, match=r"x\.npz: expected an \.npz file of named arrays, found unreadable"):
        load_npz(path, expected=[SPEC])


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_npz(tmp_path / "nope.npz")
    with pytest.raises(InputError, match="no such file"):
        sha256_file(tmp_path / "nope.bin")


def test_onnx_loader_rejects_non_onnx_and_truncated_files(tmp_path, tiny_onnx):
    (tmp_path / "junk.onnx").write_bytes(b"\x00\x01garbage")
    with pytest.raises(InputError, match=r"junk\.onnx: expected a valid ONNX model"):
        load_onnx(tmp_path / "junk.onnx")
    data = tiny_onnx.read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=r"cut\.onnx: expected a valid ONNX model"):
        load_onnx(tmp_path / "cut.onnx")


def test_onnx_input_specs_mark_symbolic_dims(tiny_onnx):
    assert onnx_input_specs(load_onnx(tiny_onnx)) == [TensorSpec("x", "float32", (None, 4))]


def test_an_npz_bomb_is_refused_before_it_is_decompressed(tmp_path, monkeypatch):
    import tracemalloc

    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, x=np.zeros((64, 1024, 1024), np.float32))  # 256 MiB of zeros, ~0.3 MiB on disk
    assert path.stat().st_size < 2 << 20
    monkeypatch.setenv("SKEWGATE_MAX_NPZ_BYTES", str(64 << 20))
    tracemalloc.start()
    with pytest.raises(InputError, match=r"bomb\.npz: expected at most 67108864 bytes decompressed .* found 268435456"):
        load_npz(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20  # refused from the headers: nothing was inflated


def test_the_npz_limit_admits_arrays_under_it(tmp_path):
    path = tmp_path / "ok.npz"
    np.savez_compressed(path, x=np.ones((4, 3), np.float32))
    assert load_npz(path, max_bytes=48)["x"].shape == (4, 3)
    with pytest.raises(InputError, match="at most 47 bytes"):
        load_npz(path, max_bytes=47)


@contextlib.contextmanager
def deadline(seconds: int = 30):
    """Fail, instead of hanging the suite, when the body blocks (opening a FIFO for reading blocks until a writer
    comes): SIGALRM interrupts the blocked system call and the handler raises."""
    def expire(signum, frame):
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_a_regular_file_within_the_limit_is_read_whole(tmp_path):
    path = tmp_path / "v.json"
    path.write_bytes(b"x" * 100)
    assert read_regular_file(path, limit=100) == b"x" * 100
    (tmp_path / "link.json").symlink_to(path)  # a link to a regular file is what it points at (mounted Secrets)
    assert read_regular_file(tmp_path / "link.json", limit=100) == b"x" * 100


def test_a_regular_file_over_the_limit_is_refused(tmp_path):
    path = tmp_path / "v.json"
    path.write_bytes(b"x" * 101)
    with pytest.raises(InputError, match=r"v\.json: expected a verdict of at most 100 bytes, found 101 bytes"):
        read_regular_file(path, limit=100, expected="a verdict")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs procfs")
def test_the_limit_holds_while_reading_not_only_by_st_size():
    assert os.stat("/proc/self/status").st_size == 0  # procfs: regular, "empty", yet hundreds of bytes
    with pytest.raises(InputError, match="found more than 10 bytes"):
        read_regular_file("/proc/self/status", limit=10)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "zz.json"
    os.mkfifo(fifo)
    with deadline(), pytest.raises(InputError, match=r"zz\.json: expected a file \(a regular file\), found a FIFO"):
        read_regular_file(fifo, limit=100)
    (tmp_path / "link.json").symlink_to(fifo)
    with deadline(), pytest.raises(InputError, match=r"link\.json: .*found a symbolic link to a FIFO"):
        read_regular_file(tmp_path / "link.json", limit=100)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_a_link_to_a_device_is_refused_before_anything_is_read(tmp_path):
    link = tmp_path / "zz.json"
    link.symlink_to("/dev/zero")
    with deadline(), pytest.raises(InputError, match=r"zz\.json: .*found a symbolic link to a character device "
                                                     r"\(/dev/zero\)"):
        read_regular_file(link, limit=1 << 30)
    with deadline(), pytest.raises(InputError, match="found a character device"):
        read_regular_file("/dev/zero", limit=1 << 30)


def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    (tmp_path / "d.json").mkdir()
    with pytest.raises(InputError, match=r"d\.json: expected a file \(a regular file\), found a directory"):
        read_regular_file(tmp_path / "d.json", limit=100)
    with pytest.raises(InputError, match=r"nope\.json: expected a key, found no such file") as caught:
        read_regular_file(tmp_path / "nope.json", limit=100, expected="a key")
    assert isinstance(caught.value.__cause__, FileNotFoundError)  # read_envelope tells "unsigned" by this
