"""A small tritonclient wrapper: HTTP or gRPC, TLS and custom headers, and a deadline with bounded retries on
every call (connection errors are retried with backoff; answers from the server are not)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from skewgate.common.errors import BackendError

Protocol = Literal["http", "grpc"]
T = TypeVar("T")


@dataclass
class TritonClient:
    url: str  # host:port
    protocol: Protocol = "http"
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: bool = False
    ca_certificate: str | None = None
    deadline_s: float = 20.0

    def __post_init__(self) -> None:
        if self.protocol == "http":
            import tritonclient.http as module

            options: dict[str, Any] = {"ssl": self.tls, "connection_timeout": self.deadline_s,
                                       "network_timeout": self.deadline_s, "concurrency": 16}
            if self.tls and self.ca_certificate:
                import gevent.ssl

                options["ssl_context_factory"] = lambda: gevent.ssl.create_default_context(cafile=self.ca_certificate)
        else:
            import tritonclient.grpc as module

            options = {"ssl": self.tls}
            if self.tls and self.ca_certificate:
                options["root_certificates"] = self.ca_certificate
        self.module = module
        self.client = module.InferenceServerClient(self.url, **options)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Retry `fn` on connection failures until the deadline, then `BackendError` naming `what`."""
        from tritonclient.utils import InferenceServerException

        deadline = time.monotonic() + self.deadline_s
        delay = 0.2
        while True:
            try:
                return fn(*args, headers=dict(self.headers) or None, **kwargs)
            except InferenceServerException:
                raise  # the server answered: not a transient failure
            except Exception as err:  # connection refused, reset, timed out
                if time.monotonic() + delay > deadline:
                    raise BackendError(f"Triton at {self.url} ({self.protocol}): {what} failed for "
                                       f"{self.deadline_s:.0f}s: {type(err).__name__}: {err}") from err
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def infer(self, model: str, feeds: Mapping[str, np.ndarray], outputs: list[str], *,
              datatypes: Mapping[str, str], version: str = "") -> dict[str, np.ndarray]:
        inputs = []
        for name, array in feeds.items():
            tensor = self.module.InferInput(name, list(array.shape), datatypes[name])
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
            inputs.append(tensor)
        requested = [self.module.InferRequestedOutput(name) for name in outputs]
        result = self.call(f"infer {model}", self.client.infer, model, inputs, model_version=version,
                           outputs=requested)
        return {name: result.as_numpy(name) for name in outputs}

    def close(self) -> None:
        self.client.close()
