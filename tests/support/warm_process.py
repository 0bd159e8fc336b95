"""A warm Python process that answers requests, one JSON line in on its stdin for one JSON line out on its
stdout: `cli_forks` and `warm_kfp` fork their children from one, so that each child skips the imports."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any


class WarmProcess:
    """`python -c script`, started on the first request (`ask`) and stopped by `close`."""

    def __init__(self, script: str) -> None:
        self._script = script
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()  # one request at a time: the answers come back in order

    def ask(self, request: Any) -> Any:
        """Send `request`; the script's answer to it."""
        with self._lock:
            if self._process is None:
                self._process = subprocess.Popen([sys.executable, "-c", self._script], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, text=True)
            process = self._process
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            line = process.stdout.readline()
        if not line:
            raise RuntimeError(f"the warm process ended (exit {process.wait()})")
        return json.loads(line)

    def close(self, *, deadline_s: float = 60.0) -> None:
        """Close its stdin (the script ends when it reads no more), then kill it after `deadline_s`."""
        if self._process is None:
            return
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
