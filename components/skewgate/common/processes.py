"""Small helpers for the real servers skewgate and its tests start: a free loopback port, and a stop that
always ends the process (SIGTERM, then SIGKILL after the grace period)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from skewgate.common.errors import BackendError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str, *, timeout_s: float = 2.0) -> bool:
    """True when an HTTP GET of `url` returns 200 (a health endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_until_up(process: subprocess.Popen[bytes], is_up: Callable[[], bool], *, what: str, log_path: Path,
                  deadline_s: float, poll_s: float = 0.3) -> None:
    """Poll `is_up` until it holds; `BackendError` with the log's tail if the process exits first, or with the
    log's path when `deadline_s` passes."""
    deadline = time.monotonic() + deadline_s
    while not is_up():
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
            raise BackendError(f"{what} exited with {process.returncode} at start: {tail}")
        if time.monotonic() > deadline:
            raise BackendError(f"{what} not up after {deadline_s:.0f}s; log: {log_path}")
        time.sleep(poll_s)


def stop(process: subprocess.Popen[bytes], *, grace_s: float = 15.0) -> None:
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)
