"""A small tritonclient wrapper: HTTP or gRPC, TLS and custom headers, and a deadline with bounded retries on
every call (connection failures are retried with backoff; answers from the server are not).

`Triton` is the seam the steps program against: `TritonClient` is the real one, tests pass a fake. tritonclient's
exceptions never leave this module: a server that cannot be reached is `Unreachable` (after the deadline), a server
that answers with an error is `Rejected` (its own text in the message).
"""

from __future__ import annotations

import contextlib
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from skewgate.common.errors import Rejected, Unreachable, map_errors

Protocol = Literal["http", "grpc"]
T = TypeVar("T")
# gRPC reports a server it cannot reach as an answer with one of these codes: a connection failure all the same
_GRPC_UNREACHABLE = ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


class ServerRefused(Rejected):
    """The server answered with an error; `answer` is its own text (a backend's reason a model will not load)."""

    def __init__(self, message: str, *, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


@dataclass(frozen=True)
class SequenceStep:
    """One request of a sequence: its correlation id (non-zero) and whether it starts or ends the sequence."""

    correlation_id: int
    start: bool = False
    end: bool = False


class Triton(typing.Protocol):
    """What a step asks of a Triton server (KServe v2). Metadata, config and statistics come back as the HTTP
    endpoint's JSON for both protocols (numbers as numbers). Raises `Unreachable` / `Rejected` only (an error the
    server answers with is `ServerRefused`, its text in `answer`)."""

    def is_server_live(self) -> bool: ...

    def is_server_ready(self) -> bool: ...

    def is_model_ready(self, model: str, version: str = "") -> bool: ...

    def load_model(self, model: str) -> None: ...

    def model_metadata(self, model: str) -> dict[str, Any]: ...

    def model_config(self, model: str) -> dict[str, Any]: ...

    def inference_statistics(self, model: str) -> dict[str, Any]: ...

    def infer(self, model: str, feeds: Mapping[str, np.ndarray], outputs: list[str], *,
              datatypes: Mapping[str, str], version: str = "", sequence: SequenceStep | None = None
              ) -> dict[str, np.ndarray]:
        """`sequence`: the request is one step of a sequence (a model under Triton's sequence batcher)."""
        ...

    def connect_again(self) -> Triton:
        """Another connection with the same settings (for another thread: tritonclient's are not thread-safe)."""
        ...

    def close(self) -> None: ...


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
        with self._mapped("connect"):
            self.client = module.InferenceServerClient(self.url, **options)

    @contextlib.contextmanager
    def _mapped(self, what: str) -> Iterator[None]:
        from tritonclient.utils import InferenceServerException

        with map_errors(f"Triton at {self.url} ({self.protocol})", what):
            try:
                yield
            except OSError as err:  # refused, reset, DNS, socket timeout: not an answer from the server
                raise Unreachable(f"Triton at {self.url} ({self.protocol}): {what} failed: "
                                  f"{type(err).__name__}: {err}") from err
            except InferenceServerException as err:
                if str(err.status()) in _GRPC_UNREACHABLE:
                    raise Unreachable(f"Triton at {self.url} ({self.protocol}): {what} failed: {err}") from err
                raise ServerRefused(f"Triton at {self.url} ({self.protocol}): {what} failed: {err}",
                                    answer=str(err)) from err

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Retry `fn` while the server cannot be reached, until the deadline; then `Unreachable` naming `what`.
        An error the server answers with is `Rejected` at once."""
        deadline = time.monotonic() + self.deadline_s
        delay = 0.2
        while True:
            try:
                with self._mapped(what):
                    return fn(*args, headers=dict(self.headers) or None, **kwargs)
            except Unreachable as err:
                if time.monotonic() + delay > deadline:
                    cause = err.__cause__ or err
                    raise Unreachable(f"Triton at {self.url} ({self.protocol}): {what} failed for "
                                      f"{self.deadline_s:.0f}s: {type(cause).__name__}: {cause}") from cause
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def is_server_live(self) -> bool:
        return bool(self.call("live", self.client.is_server_live))

    def is_server_ready(self) -> bool:
        return bool(self.call("ready", self.client.is_server_ready))

    def is_model_ready(self, model: str, version: str = "") -> bool:
        return bool(self.call("model ready", self.client.is_model_ready, model, version))

    def load_model(self, model: str) -> None:
        self.call("load", self.client.load_model, model)

    def model_metadata(self, model: str) -> dict[str, Any]:
        if self.protocol == "http":
            return dict(self.call("metadata", self.client.get_model_metadata, model))
        metadata = dict(self.call("metadata", self.client.get_model_metadata, model, as_json=True))
        for tensor in (*metadata.get("inputs", []), *metadata.get("outputs", [])):  # gRPC JSON has string dims
            tensor["shape"] = [int(d) for d in tensor.get("shape", [])]
        return metadata

    def model_config(self, model: str) -> dict[str, Any]:
        if self.protocol == "http":
            return dict(self.call("config", self.client.get_model_config, model))
        config = dict(self.call("config", self.client.get_model_config, model, as_json=True)["config"])
        for tensor in (*config.get("input", []), *config.get("output", [])):
            tensor["dims"] = [int(d) for d in tensor.get("dims", [])]
        config["max_batch_size"] = int(config.get("max_batch_size", 0))
        return config

    def inference_statistics(self, model: str) -> dict[str, Any]:
        if self.protocol == "http":
            return dict(self.call("statistics", self.client.get_inference_statistics, model))
        return dict(self.call("statistics", self.client.get_inference_statistics, model, as_json=True))

    def infer(self, model: str, feeds: Mapping[str, np.ndarray], outputs: list[str], *,
              datatypes: Mapping[str, str], version: str = "", sequence: SequenceStep | None = None
              ) -> dict[str, np.ndarray]:
        flags = {} if sequence is None else {"sequence_id": sequence.correlation_id,
                                             "sequence_start": sequence.start, "sequence_end": sequence.end}
        inputs = []
        with self._mapped(f"infer {model}"):  # a dtype the client cannot send is refused here, before the server
            for name, array in feeds.items():
                tensor = self.module.InferInput(name, list(array.shape), datatypes[name])
                tensor.set_data_from_numpy(np.ascontiguousarray(array))
                inputs.append(tensor)
            requested = [self.module.InferRequestedOutput(name) for name in outputs]
        if sequence is None:
            result = self.call(f"infer {model}", self.client.infer, model, inputs, model_version=version,
                               outputs=requested)
        else:  # never retried: the server may have applied the step to the sequence's state before the error
            with self._mapped(f"infer {model} (sequence {sequence.correlation_id})"):
                result = self.client.infer(model, inputs, model_version=version, outputs=requested,
                                           headers=dict(self.headers) or None, **flags)
        with self._mapped(f"infer {model}"):
            return {name: result.as_numpy(name) for name in outputs}

    def connect_again(self) -> TritonClient:
        return TritonClient(self.url, self.protocol, self.headers, self.tls, self.ca_certificate, self.deadline_s)

    def close(self) -> None:
        with self._mapped("close"):
            self.client.close()
