"""The one error tree. Every error here means "could not evaluate" (exit code 2, verdict status `error`).

A failed gate is never an exception: it is a `Verdict` with status `fail`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
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


class Inconsistent(BackendError):
    """The backend answered, but what it answered contradicts what was written (tags that did not read back)."""


# What a backend's own exceptions mean, judged by type name so that no client library is imported here.
_UNREACHABLE_NAMES = ("ConnectionError", "ConnectError", "ConnectTimeout", "ReadTimeout", "Timeout",
                      "TimeoutError", "MaxRetryError", "NewConnectionError", "ProtocolError", "RemoteDisconnected")


def _classify(err: BaseException) -> type[BackendError]:
    names = {cls.__name__ for cls in type(err).__mro__}
    if isinstance(err, (ConnectionError, TimeoutError)) or names & set(_UNREACHABLE_NAMES):
        return Unreachable
    return Rejected


@contextlib.contextmanager
def map_errors(backend: str, what: str) -> Iterator[None]:
    """Translate a backend library's exceptions into `Unreachable` / `Rejected`, once, at the boundary.

    skewgate's own errors pass through unchanged (an `InputError` raised inside stays an `InputError`), and so do
    programming errors (`TypeError`, `AttributeError`, …: a bug must not be reported as "the server refused").
    """
    try:
        yield
    except SkewgateError:
        raise
    except (TypeError, AttributeError, NameError, AssertionError):
        raise
    except Exception as err:
        kind = _classify(err)
        raise kind(f"{backend}: {what} failed: {type(err).__name__}: {err}") from err
