"""The one error tree. Every error here means "could not evaluate" (exit code 2, verdict status `error`).

A failed gate is never an exception: it is a `Verdict` with status `fail`.
"""

from __future__ import annotations

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
