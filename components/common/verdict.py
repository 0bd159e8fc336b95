"""The verdict model shared by every step: `Check`, `TensorStats`, `Subject` and `Verdict`.

Frozen, typed and JSON round-trippable. The promotion gate reads only verdicts, so everything it needs to
decide (status per step, the SHA-256 of the judged artifact) lives here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

from skewgate.common.errors import InputError

SCHEMA_VERSION = 1
Status = Literal["pass", "warn", "fail", "error"]
Severity = Literal["fail", "warn"]
STATUSES: tuple[str, ...] = get_args(Status)


def _finite_or_none(value: float | None) -> float | None:
    # JSON has no NaN/Inf; a non-finite statistic is reported as null (the nan/inf counts say why).
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True)
class Check:
    """One judged quantity. `value` is compared against `limit`; `passed` is the judgement.

    A failed check with severity `warn` makes the verdict `warn` instead of `fail`.
    """

    name: str
    passed: bool
    value: float | None = None
    limit: float | None = None
    detail: str = ""
    severity: Severity = "fail"

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _finite_or_none(self.value))
        object.__setattr__(self, "limit", _finite_or_none(self.limit))


@dataclass(frozen=True)
class TensorStats:
    """Summary of one tensor at one stage (for example `torch.output`). Statistics are over finite values."""

    name: str
    stage: str
    shape: tuple[int, ...]
    dtype: str
    count: int
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    p01: float | None
    p50: float | None
    p99: float | None
    p999: float | None
    nan_count: int
    inf_count: int
    zero_fraction: float | None
    sha256: str


@dataclass(frozen=True)
class Subject:
    """What was judged: the artifact (path and SHA-256) and the SHA-256 of each input data set."""

    artifact: str
    sha256: str
    data: Mapping[str, str] = field(default_factory=dict)
    source: str | None = None
    source_sha256: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "data", MappingProxyType(dict(self.data)))


@dataclass(frozen=True)
class Verdict:
    """A step's answer. Build it with `Verdict.from_checks` so that the status follows from the checks."""

    step: str
    status: Status
    checks: tuple[Check, ...]
    subject: Subject | None
    stats: tuple[TensorStats, ...] = ()
    message: str = ""
    versions: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        object.__setattr__(self, "checks", tuple(self.checks))
        object.__setattr__(self, "stats", tuple(self.stats))
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        object.__setattr__(self, "details", MappingProxyType(dict(self.details)))

    @classmethod
    def from_checks(
        cls,
        step: str,
        checks: Iterable[Check],
        *,
        subject: Subject | None,
        stats: Iterable[TensorStats] = (),
        details: Mapping[str, Any] | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> Verdict:
        """Derive the status: no checks → fail (empty means fail); a failed `fail` check → fail; else warn/pass."""
        checks = tuple(checks)
        failed = [c for c in checks if not c.passed]
        if not checks:
            status: Status = "fail"
            message = "no checks were evaluated"
        elif any(c.severity == "fail" for c in failed):
            status = "fail"
            message = "failed: " + ", ".join(c.name for c in failed if c.severity == "fail")
        elif failed:
            status = "warn"
            message = "warnings: " + ", ".join(c.name for c in failed)
        else:
            status = "pass"
            message = f"all {len(checks)} checks passed"
        return cls(
            step=step,
            status=status,
            checks=checks,
            subject=subject,
            stats=tuple(stats),
            message=message,
            versions=versions if versions is not None else collect_versions(),
            details=details or {},
        )

    @classmethod
    def error(cls, step: str, message: str, *, subject: Subject | None = None) -> Verdict:
        """The verdict written when a step could not evaluate (exit code 2)."""
        return cls(step=step, status="error", checks=(), subject=subject, message=message,
                   versions=collect_versions())

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    def check(self, name: str) -> Check:
        """The check called `name` (KeyError when there is none)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"{self.step} has no check {name!r} (checks: {[c.name for c in self.checks]})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "step": self.step,
            "status": self.status,
            "message": self.message,
            "created_at": self.created_at,
            "subject": None if self.subject is None else {**asdict_shallow(self.subject),
                                                          "data": dict(self.subject.data)},
            "checks": [asdict_shallow(c) for c in self.checks],
            "stats": [{**asdict_shallow(s), "shape": list(s.shape)} for s in self.stats],
            "versions": dict(self.versions),
            "details": _plain(self.details),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, allow_nan=False)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<verdict>") -> Verdict:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise InputError(source, field="schema_version", expected=str(SCHEMA_VERSION), found=repr(version))
        try:
            subject = data.get("subject")
            return cls(
                step=data["step"],
                status=data["status"],
                checks=tuple(Check(**c) for c in data["checks"]),
                subject=Subject(**subject) if subject is not None else None,
                stats=tuple(TensorStats(**{**s, "shape": tuple(s["shape"])}) for s in data.get("stats", ())),
                message=data.get("message", ""),
                versions=data.get("versions", {}),
                details=data.get("details", {}),
                created_at=data["created_at"],
                schema_version=version,
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(source, expected="a skewgate verdict", found=f"{type(err).__name__}: {err}") from err

    @classmethod
    def read(cls, path: str | Path) -> Verdict:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as err:
            raise InputError(path, expected="a verdict JSON file", found="no such file") from err
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InputError(path, expected="a verdict JSON file", found=f"invalid JSON ({err})") from err
        if not isinstance(data, dict):
            raise InputError(path, expected="a JSON object", found=type(data).__name__)
        return cls.from_dict(data, source=str(path))


def asdict_shallow(obj: Any) -> dict[str, Any]:
    """Field → value, without `dataclasses.asdict`'s deep copy (which cannot copy read-only mappings)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _plain(value: Any) -> Any:
    """Turn read-only mappings and tuples from `details` back into JSON-able dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def collect_versions() -> dict[str, str]:
    """Versions of skewgate and of the numeric stack that is installed (not imported: this stays cheap)."""
    from importlib import metadata

    versions: dict[str, str] = {}
    for dist in ("skewgate", "torch", "onnx", "onnxruntime", "onnxscript", "numpy", "kfp", "mlflow"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions
