"""The one error tree. Every error here means "could not evaluate" (exit code 2, verdict status `error`).

A failed gate is never an exception: it is a `Verdict` with status `fail`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path


class SkewgateError(Exception):
    """Base of every error skewgate raises on purpose."""


class InputError(SkewgateError):
    """Bad input: names the file or field, what was expected and what was found."""

    def __init__(self, source: str | Path, *, field: str | None = None, expected: str, found: str) -> None:
        self.source = str(source)
        self.field = field
        self.expected = expected
        self.found = found
        where = f"{self.source}: {field}" if field else self.source
        super().__init__(f"{where}: expected {expected}, found {found}")


class BackendError(SkewgateError):
    """A backend (MLflow server, registry, runtime) was unreachable, timed out, or answered inconsistently."""


class ExportError(SkewgateError):
    """The model could not be exported or loaded by the runtime, so nothing could be compared."""


class Unreachable(BackendError):
    """The backend could not be reached or did not answer in time (connection refused, DNS, timeout)."""


class Rejected(BackendError):
    """The backend answered and refused the request (HTTP 4xx/5xx, an RPC error, a permission denied)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        # The backend's own name for the refusal (MLflow's RESOURCE_ALREADY_EXISTS, an HTTP status such as
        # "404"): callers for whom one refusal is an answer ("not there", "created meanwhile") test it.
        self.code = code


class Inconsistent(BackendError):
    """The backend answered, but what it answered contradicts what was written (tags that did not read back)."""


# What a backend's own exceptions mean, judged by type name so that no client library is imported here.
_UNREACHABLE_NAMES = frozenset({
    "ConnectionError", "ConnectError", "ConnectTimeout", "ConnectTimeoutError", "ReadTimeout", "ReadTimeoutError",
    "Timeout", "TimeoutError", "MaxRetryError", "NewConnectionError", "NameResolutionError", "ProtocolError",
    "RemoteDisconnected", "gaierror"})


def _chain(err: BaseException) -> Iterator[BaseException]:
    """`err` and what it was raised from or while handling: client libraries wrap a refused connection in their
    own exception (MLflow raises `MlflowException("API request … failed")` while handling requests' error)."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _classify(err: BaseException) -> type[Unreachable] | type[Rejected]:
    for link in _chain(err):
        names = {cls.__name__ for cls in type(link).__mro__}
        if isinstance(link, ConnectionError | TimeoutError) or names & _UNREACHABLE_NAMES:
            return Unreachable
    return Rejected


def _code(err: BaseException) -> str | None:
    """MLflow's `error_code`, else an HTTP status (`status` of kfp_server_api's ApiException, `status_code`)."""
    for attribute in ("error_code", "status", "status_code"):
        value = getattr(err, attribute, None)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


@contextlib.contextmanager
def map_errors(backend: str, what: str) -> Iterator[None]:
    """Translate a backend library's exceptions into `Unreachable` / `Rejected`, once, at the boundary.

    `backend` names the backend and where it is (`MLflow at http://…`), `what` the operation; both start the
    message. A `Rejected` carries the backend's own error code (`.code`). skewgate's own errors pass through
    unchanged (an `InputError` raised inside stays an `InputError`), and so do programming errors (`TypeError`,
    `AttributeError`, …: a bug must not be reported as "the server refused").
    """
    try:
        yield
    except SkewgateError:
        raise
    except (TypeError, AttributeError, NameError, AssertionError):
        raise
    except Exception as err:
        message = f"{backend}: {what} failed: {type(err).__name__}: {err}"
        if _classify(err) is Unreachable:
            raise Unreachable(message) from err
        raise Rejected(message, code=_code(err)) from err


def check_read_back(what: str, written: Mapping[str, str], read: Mapping[str, str], *,
                    present_only: Collection[str] = ()) -> None:
    """`Inconsistent` naming every key of `written` that `read` (the backend's answer, read after writing) does
    not hold with the written value; keys in `present_only` need only be there (a concurrent writer may have
    put its own, equally valid, value)."""
    differing = sorted(key for key, value in written.items()
                       if read.get(key) != value and not (key in present_only and read.get(key)))
    if differing:
        raise Inconsistent(f"{what} did not read back: {differing}")
