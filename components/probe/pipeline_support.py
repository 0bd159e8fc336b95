"""Probe a given Triton URL, or — when none is given (local runs, CI, a pod with tritonserver inside) — write
the repository, start a local tritonserver, and probe that."""

from __future__ import annotations

import tempfile
from pathlib import Path

from skewgate.common.triton.repository import write_repository
from skewgate.common.triton.server import triton_server
from skewgate.common.verdict import Verdict
from skewgate.probe.core import ProbeOptions, probe


def probe_local_or_remote(*, url: str, model: str, onnx: str | Path, inputs: str | Path,
                          repository: Path | None = None, options: ProbeOptions | None = None) -> Verdict:
    options = options or ProbeOptions()
    if url:
        return probe(url=url, model=model, onnx=onnx, inputs=inputs, repository=repository, options=options)
    with tempfile.TemporaryDirectory(prefix="skewgate-triton-") as tmp:
        repo = Path(tmp) / "repository"
        write_repository(onnx, repo, name=model)
        with triton_server(repo, models=(model,), log_path=Path(tmp) / "tritonserver.log") as server:
            address = server.http_url if options.protocol == "http" else server.grpc_url
            return probe(url=address, model=model, onnx=onnx, inputs=inputs, repository=repo, options=options)
