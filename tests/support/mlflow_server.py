"""A real `mlflow server` on 127.0.0.1 for integration tests: started, awaited, and always stopped."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from skewgate.common.processes import answers, free_port, stop, wait_until_up


@contextlib.contextmanager
def mlflow_server(workdir: Path, *, startup_deadline_s: float = 120.0) -> Iterator[str]:
    """Yield the server's URL once `/health` answers; stop it (terminate, then kill) on the way out."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "mlflow-server.log"
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination", str(workdir / "artifacts"),
    ]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
        try:
            wait_until_up(process, lambda: answers(f"{url}/health"), what="mlflow server", log_path=log_path,
                          deadline_s=startup_deadline_s, poll_s=0.5)
            yield url
        finally:
            stop(process)
