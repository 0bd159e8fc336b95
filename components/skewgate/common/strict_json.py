"""Typed, strict reading of JSON objects: the evidence formats (verdicts, attestations) are parsed with it.

`json.loads` gives `True` where an int was meant and `"false"` where a bool was meant; Python would happily treat
both as truthy values. Every accessor here checks the exact JSON type, and `done()` refuses fields nobody read,
so a hand-edited or padded document is refused with the field named instead of being half-understood.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, TypeVar

from skewgate.common.errors import InputError

Choice = TypeVar("Choice", bound=str)
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_MISSING = object()


class Fields:
    """One JSON object being read; `where` is its path inside the document (for error messages)."""

    def __init__(self, data: Any, *, source: str, where: str) -> None:
        if not isinstance(data, dict):
            raise InputError(source, field=where or None, expected="a JSON object", found=_kind(data))
        self.data = data
        self.source = source
        self.where = where
        self.seen: set[str] = set()

    def _raw(self, key: str, *, required: bool = True) -> Any:
        self.seen.add(key)
        if key not in self.data:
            if required:
                raise InputError(self.source, field=self._path(key), expected="a value", found="no such field")
            return _MISSING
        return self.data[key]

    def _path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _fail(self, key: str, expected: str, value: Any) -> InputError:
        return InputError(self.source, field=self._path(key), expected=expected, found=_kind(value))

    def string(self, key: str) -> str:
        value = self._raw(key)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def optional_string(self, key: str) -> str | None:
        value = self._raw(key, required=False)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, str):
            raise self._fail(key, "a string or null", value)
        return value

    def sha256(self, key: str) -> str:
        value = self.string(key)
        if not SHA256_HEX.fullmatch(value):
            raise self._fail(key, "a SHA-256 as 64 lowercase hex digits", value)
        return value

    def choice(self, key: str, choices: Sequence[Choice]) -> Choice:
        """The string at `key`, which must be one of `choices`; typed as the choices are (a `Literal`'s values
        from `get_args` give that `Literal`)."""
        value = self.string(key)
        for choice in choices:
            if value == choice:
                return choice
        raise self._fail(key, f"one of {list(choices)}", value)

    def boolean(self, key: str) -> bool:
        value = self._raw(key)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def integer(self, key: str) -> int:
        value = self._raw(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, "an integer", value)
        return value

    def optional_number(self, key: str) -> float | None:
        value = self._raw(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self._fail(key, "a finite number or null", value)
        return float(value)

    def ints(self, key: str) -> list[int]:
        value = self._raw(key)
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise self._fail(key, "a list of integers", value)
        return value

    def strings(self, key: str) -> list[str]:
        value = self._raw(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._fail(key, "a list of strings", value)
        return value

    def str_map(self, key: str) -> dict[str, str]:
        value = self._raw(key)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._fail(key, "an object of strings", value)
        return value

    def json_object(self, key: str) -> dict[str, Any]:
        value = self._raw(key)
        if not isinstance(value, dict):
            raise self._fail(key, "an object", value)
        return value

    def optional_object(self, key: str) -> Fields | None:
        value = self._raw(key)
        return None if value is None else Fields(value, source=self.source, where=self._path(key))

    def objects(self, key: str) -> list[Fields]:
        value = self._raw(key)
        if not isinstance(value, list):
            raise self._fail(key, "a list of objects", value)
        return [Fields(item, source=self.source, where=f"{self._path(key)}[{i}]") for i, item in enumerate(value)]

    def done(self) -> None:
        """Refuse fields that no accessor asked for: unknown fields are not silently ignored."""
        unknown = sorted(set(self.data) - self.seen)
        if unknown:
            raise InputError(self.source, field=self._path(unknown[0]), expected="no unknown fields",
                             found=f"unknown field(s) {unknown}")


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'…' if len(text) > 60 else ''}"
