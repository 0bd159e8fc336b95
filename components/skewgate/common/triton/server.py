"""A real `tritonserver` on this machine: where it is installed, and a context manager that runs it.

The binary comes from the `nvidia-pytriton` wheel (Triton 2.51 with the Python backend only). It is unpacked
into a Triton home together with a small Python environment of its own — numpy<2 (the backend is built against
numpy 1.x and returns empty tensors with numpy 2) and onnxruntime — because the Python backend takes the first
`python3` on the server's PATH. `skewgate probe install` (or `make triton`) prepares it. The home is the first
that holds an installation of: `$SKEWGATE_TRITON_HOME`, the checkout's `.triton` (where `make triton` puts it),
`~/.cache/skewgate/triton`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from skewgate.common.errors import BackendError
from skewgate.common.processes import answers, free_port, stop, wait_until_up

WHEEL = "nvidia-pytriton==0.7.0"
BACKEND_PACKAGES = ("numpy>=1.26,<2", "onnxruntime>=1.22,<1.33")


HOME_VARIABLE = "SKEWGATE_TRITON_HOME"


def default_home() -> Path:
    return Path.home() / ".cache" / "skewgate" / "triton"


def checkout_home() -> Path | None:
    """`<checkout>/.triton` (where `make triton` installs) when skewgate runs from a checkout: the folder
    above the package's src root (`<checkout>/components/skewgate`), when it holds a `pyproject.toml` (an installed
    wheel's package sits in site-packages, two levels below no such file)."""
    import skewgate

    root = Path(skewgate.__file__).resolve().parents[2]
    return root / ".triton" if (root / "pyproject.toml").is_file() else None


def candidate_homes() -> list[tuple[Path, str]]:
    """Where Triton's home is looked for, in order, each with where that place comes from:
    `$SKEWGATE_TRITON_HOME`, then the checkout's `.triton` (when it exists), then the default."""
    candidates: list[tuple[Path, str]] = []
    if os.environ.get(HOME_VARIABLE):
        candidates.append((Path(os.environ[HOME_VARIABLE]).expanduser(), f"${HOME_VARIABLE}"))
    checkout = checkout_home()
    if checkout is not None and checkout.is_dir():
        candidates.append((checkout, "the checkout's `make triton`"))
    candidates.append((default_home(), "the default"))
    unique: dict[Path, str] = {}
    for home, origin in candidates:
        unique.setdefault(home, origin)
    return list(unique.items())


def triton_home() -> Path:
    """The first of `candidate_homes` (where `probe install` installs without `--home`)."""
    return candidate_homes()[0][0]


def find_installation() -> Installation:
    """The first complete installation among `candidate_homes`; else a `BackendError` naming every place
    looked at, what each lacked, and the variable that points elsewhere."""
    looked = []
    for home, origin in candidate_homes():
        missing = Installation(home).missing()
        if not missing:
            return Installation(home)
        looked.append(f"{home} ({origin}: {'no such folder' if not home.exists() else f'no {missing[0]}'})")
    raise BackendError(f"tritonserver is not installed; looked in {'; '.join(looked)}. Run `make triton` or "
                       f"`skewgate probe install`, or set {HOME_VARIABLE} to the folder that holds it")


@dataclass(frozen=True)
class Installation:
    home: Path

    @property
    def binary(self) -> Path:
        return self.home / "pytriton" / "tritonserver" / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.home / "pytriton" / "tritonserver" / "backends"

    @property
    def python_bin(self) -> Path:
        return self.home / "backend-env" / "bin"

    def missing(self) -> list[Path]:
        """What a working installation needs that is not there (the binary, the backend stub, its python3)."""
        return [p for p in (self.binary, self.backends / "python" / "triton_python_backend_stub",
                            self.python_bin / "python3") if not p.exists()]

    def check(self) -> Installation:
        missing = self.missing()
        if missing:
            raise BackendError(f"tritonserver is not installed under {self.home} (missing {missing[0]}); "
                               f"run `skewgate probe install` or `make triton`, or set {HOME_VARIABLE} to the "
                               "folder that holds it")
        return self


def install(home: Path | None = None) -> Installation:
    """Unpack the wheel's server, put the Python-backend stub for this Python in place, build the backend env."""
    target = Installation(home or triton_home())
    target.home.mkdir(parents=True, exist_ok=True)
    if not target.binary.exists():
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, WHEEL],
                           check=True)
            (wheel,) = Path(tmp).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(target.home)
        target.binary.chmod(0o755)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = target.home / "pytriton" / "tritonserver" / "python_backend_stubs" / version / "triton_python_backend_stub"
    destination = target.backends / "python" / "triton_python_backend_stub"
    shutil.copyfile(stub, destination)
    destination.chmod(0o755)
    if not (target.python_bin / "python3").exists():
        subprocess.run([sys.executable, "-m", "venv", str(target.home / "backend-env")], check=True)
        subprocess.run([str(target.python_bin / "pip"), "install", "--quiet", *BACKEND_PACKAGES], check=True)
    return target.check()


@dataclass(frozen=True)
class RunningServer:
    http_url: str  # host:port, as tritonclient takes it
    grpc_url: str
    log_path: Path
    repository: Path


@contextlib.contextmanager
def triton_server(repository: str | Path, *, models: tuple[str, ...] = (), log_path: Path | None = None,
                  startup_deadline_s: float = 90.0,
                  installation: Installation | None = None) -> Iterator[RunningServer]:
    """Run tritonserver on free 127.0.0.1 ports with explicit model control, loading `models` at start.

    Yields once the server is live (models that fail to load leave it live but not ready: the probe reports
    that). The server is always stopped on the way out — SIGTERM, then SIGKILL after 15 s.
    """
    found = installation.check() if installation is not None else find_installation()
    repository = Path(repository).resolve()
    http_port, grpc_port = free_port(), free_port()
    log_path = log_path or repository.parent / "tritonserver.log"
    command = [
        str(found.binary), f"--model-repository={repository}", f"--backend-directory={found.backends}",
        "--model-control-mode=explicit", *[f"--load-model={m}" for m in models],
        "--http-address=127.0.0.1", f"--http-port={http_port}",
        "--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}",
        "--allow-metrics=false", "--exit-on-error=false", "--strict-readiness=true", "--log-verbose=0",
    ]
    env = {**os.environ, "PATH": f"{found.python_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    server = RunningServer(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", log_path, repository)
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_until_up(process, lambda: answers(f"http://{server.http_url}/v2/health/live", timeout_s=1),
                          what="tritonserver", log_path=log_path, deadline_s=startup_deadline_s)
            yield server
        finally:
            stop(process)

