"""Calls into MLflow under skewgate's error mapping and deadlines: `_mapped` (every failure becomes `Unreachable`,
`Rejected` or `Inconsistent`), `retry_until` (the first call of a step retried until its deadline), the HTTP
defaults, and the experiment lookup."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import BackendError, Inconsistent, InputError, Rejected, Unreachable, map_errors
from skewgate.common.interrupts import DeadlineExceeded, overall_deadline

if TYPE_CHECKING:
    from mlflow import MlflowClient


log = logging.getLogger(__name__)

# MLflow sends usage telemetry to a public endpoint from every process that imports it, unless told not to. A gate
# runs inside clusters and CI without egress and must not phone home (its background client has also been seen to
# fail a request it races with), so it is off unless the user opted in by setting the variable (mlflow is imported
# only inside this package, after this line).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

T = TypeVar("T")


# MLflow answers a lookup of something that is not there with one of these codes, depending on the store.
_MISSING = frozenset({"RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"})


# Refusals that waiting cannot change: `connect` gives up at once instead of retrying until its deadline.
_FINAL_REFUSALS = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "CUSTOMER_UNAUTHORIZED", "401", "403"})


def local_store(uri: str) -> Path | None:
    """The file (`sqlite:///PATH`) or folder (`file:PATH`, a bare folder) of a store on this machine; None for a
    server, another database, or an in-memory store."""
    if uri.startswith("sqlite:///"):
        path = uri.removeprefix("sqlite:///").split("?", 1)[0]
        return Path(path) if path not in ("", ":memory:") else None
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if not uri or uri in ("databricks", "databricks-uc") or len(parts.scheme) > 1:
        return None
    return Path(uri)  # no scheme (or a drive letter): a folder


def registry_identity(uri: str) -> str:
    """A stable name of the store `uri` reaches, which a verdict signs as the registry it judged in: a local store
    by its absolute path, anything else by scheme, host, port and path (no credentials, no trailing slash)."""
    path = local_store(uri)
    if path is not None:
        return f"{'sqlite' if uri.startswith('sqlite:') else 'file'}://{path.resolve()}"
    parts = urlsplit(uri)
    if not parts.scheme or not parts.netloc:
        return uri
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme.lower()}://{(parts.hostname or '').lower()}{port}{parts.path.rstrip('/')}"


def require_store(uri: str) -> None:
    """No step creates a store. MLflow makes a new empty one wherever a mistyped sqlite path or folder points, where
    compare then finds no champion ("first promotion") and verify no alias; so a local store must exist. An
    `InputError` names the path and how to make a store on purpose."""
    path = local_store(uri)
    if path is not None and not path.exists():
        raise InputError(uri, expected=f"an existing MLflow store (skewgate never creates one; make it on purpose "
                         f"with `mlflow db upgrade {uri}`)" if uri.startswith("sqlite:") else
                         "an existing MLflow store (skewgate never creates one)",
                         found=f"no registry at {path.resolve()}")


def create_store(uri: str) -> None:
    """Make the store `uri` names, with MLflow's schema: the one way skewgate creates a store, on purpose (the demo's
    embedded one; `mlflow db upgrade URI` does the same from the shell)."""
    path = local_store(uri)
    if path is not None and uri.startswith("sqlite:"):
        path.parent.mkdir(parents=True, exist_ok=True)
    http_defaults()
    from mlflow import MlflowClient

    with _mapped(uri, "create the store"):
        MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments(max_results=1)


@contextlib.contextmanager
def _mapped(uri: str, what: str, *, deadline_s: float | None = None) -> Iterator[None]:
    """MLflow's exceptions while doing `what` as `Unreachable` / `Rejected` naming the server; with `deadline_s`,
    the call also ends within that many seconds of wall time (`Unreachable` otherwise), however the server answers:
    one that sends a byte every few seconds defeats every per-read timeout, never this (main thread only; inside
    an enclosing overall deadline, such as verify's, that one governs)."""
    with map_errors(f"MLflow at {uri}", what):
        if deadline_s is None:
            yield
            return
        try:
            with overall_deadline(deadline_s, f"MLflow at {uri}: {what}"):
                yield
        except DeadlineExceeded as err:
            raise Unreachable(f"MLflow at {uri}: {what} not done within {deadline_s:g} s (--mlflow-deadline)") \
                from err


def _or_none(uri: str, what: str, lookup: Callable[[], T], *, missing: frozenset[str] = _MISSING) -> T | None:
    """`lookup()`, or None when MLflow says the thing does not exist; any other failure stays mapped."""
    try:
        with _mapped(uri, what):
            return lookup()
    except Rejected as err:
        if err.code in missing:
            return None
        raise


def http_defaults() -> None:
    """MLflow's own HTTP retries would wait minutes on a dead server (7 retries with backoff, 120 s a request):
    skewgate owns the deadline instead (`retry_until`). Values the user set in the environment stay."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault(_TIMEOUT_ENV, "10")
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # no "creating tables" chatter on stderr


_TIMEOUT_ENV = "MLFLOW_HTTP_REQUEST_TIMEOUT"


def retry_until(uri: str, deadline_s: float, attempt: Callable[[], T]) -> T:
    """`attempt()`, retried with backoff (0.5 s doubling to 5 s) while MLflow at `uri` fails, until `deadline_s`
    has passed; then the last failure (`Unreachable` says for how long). A refusal that waiting cannot change
    (authentication, permission) is raised at once. Each attempt's HTTP requests time out within what is left of
    the deadline (at least 1 s): a server that accepts and never answers cannot hold a call far past it."""
    deadline = time.monotonic() + deadline_s
    delay = 0.5
    while True:
        try:
            # and the attempt as a whole: a server answering one byte at a time defeats the per-read timeout
            with _request_timeout(deadline), _mapped(uri, "connect",
                                                     deadline_s=max(1.0, round(deadline - time.monotonic(), 1))):
                return attempt()
        except BackendError as err:
            if isinstance(err, Rejected) and err.code in _FINAL_REFUSALS:
                raise
            if time.monotonic() + delay > deadline:
                if isinstance(err, Unreachable):
                    cause = err.__cause__ or err
                    raise Unreachable(f"MLflow at {uri} unreachable for {deadline_s:.0f}s: "
                                      f"{type(cause).__name__}: {cause}") from err
                raise
            log.warning("MLflow at %s not reachable (%s); retrying in %.1fs", uri, type(err).__name__, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


@contextlib.contextmanager
def _request_timeout(deadline: float) -> Iterator[None]:
    """MLflow's per-request timeout (read from the environment on every request), cut to the time left before
    `deadline` while the block runs, then restored."""
    previous = os.environ.get(_TIMEOUT_ENV)
    try:
        configured: int | None = int(previous or "10")
    except ValueError:  # not ours to judge: MLflow reports its own setting
        configured = None
    if configured is not None:
        os.environ[_TIMEOUT_ENV] = str(min(configured, max(1, math.ceil(deadline - time.monotonic()))))
    try:
        yield
    finally:
        if configured is not None:
            if previous is None:
                os.environ.pop(_TIMEOUT_ENV, None)
            else:
                os.environ[_TIMEOUT_ENV] = previous


def _experiment_id(client: MlflowClient, uri: str, name: str) -> str:
    """The experiment's id, created (tagged with its kind) when missing; an older one gets the kind tag."""
    with _mapped(uri, f"look up experiment {name!r}"):
        found = client.get_experiment_by_name(name)
    if found is None:
        location = None
        if uri.startswith("sqlite:///"):
            # Keep artifacts beside the embedded store instead of in ./mlruns of whatever the cwd is.
            location = (Path(uri.removeprefix("sqlite:///")).parent / "artifacts").resolve().as_uri()
        try:
            with _mapped(uri, f"create experiment {name!r}"):
                return str(client.create_experiment(name, artifact_location=location,
                                                    tags={conv.EXPERIMENT_KIND_TAG: conv.EXPERIMENT_KIND}))
        except Rejected as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":  # another step created it meanwhile
                raise
        with _mapped(uri, f"look up experiment {name!r}"):
            found = client.get_experiment_by_name(name)
        if found is None:
            raise Inconsistent(f"MLflow at {uri}: experiment {name!r} already exists, yet is not found by name")
    if conv.EXPERIMENT_KIND_TAG not in found.tags:  # made before skewgate tagged it
        with _mapped(uri, f"tag experiment {name!r}"):
            client.set_experiment_tag(found.experiment_id, conv.EXPERIMENT_KIND_TAG, conv.EXPERIMENT_KIND)
    return str(found.experiment_id)
