"""The verdict model shared by every step: `Check`, `TensorStats`, `Subject` and `Verdict`.

Frozen, typed and JSON round-trippable. The promotion gate reads only verdicts, so everything it needs to
decide (status per step, the SHA-256 of the judged artifact) lives here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, get_args

from skewgate.common.errors import InputError
from skewgate.common.strict_json import Fields

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# 2: `registry_tags` is a field of its own (version 1 kept it in `details`); 3: `settings`, what the step was
# judged with (a policy bounds them: common/policy.py). Older files are still read, and written back byte for byte,
# so that their signatures keep verifying.
SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
Status = Literal["pass", "warn", "fail", "error"]
Severity = Literal["fail", "warn"]
STATUSES: tuple[Status, ...] = get_args(Status)
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
# A verdict larger than this is refused before it is parsed (a real one is tens of kilobytes).
MAX_VERDICT_BYTES = 16 * 1024 * 1024
# `field(default=None, metadata=OMIT_IF_NONE)`: a details field left out of the JSON while it is None (a pair that
# was not judged, say) rather than written as null, for details whose readers test for the key.
OMIT_IF_NONE: Mapping[str, bool] = MappingProxyType({"omit_if_none": True})
# Step names become registry tag prefixes (`skewgate.<step>.`): plain names only, and never one of the names that
# promote itself writes under, so that no verdict can speak for the promotion or overwrite the evidence digests.
STEP_NAME = re.compile(r"[a-z][a-z0-9-]{0,39}")
RESERVED_STEPS = frozenset({"promotion", "onnx_sha256", "verdict_sha256", "attestation", "outcome", "kind",
                            "step", "status", "role", "pipeline_run_id", "int8"})


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
    # Tags the step asks promote to set on the registered model version, all under `skewgate.<step>.`.
    registry_tags: Mapping[str, str] = field(default_factory=dict)
    # What the step was judged with (its options, as JSON: `judged_with`): signed with the verdict, so that a policy
    # can refuse a pass judged under a loosened tolerance or budget. Empty: not said (an error, an older file).
    settings: Mapping[str, Any] = field(default_factory=dict)
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if not STEP_NAME.fullmatch(self.step) or self.step in RESERVED_STEPS:
            raise ValueError(f"step must match {STEP_NAME.pattern} and not be reserved, got {self.step!r}")
        object.__setattr__(self, "checks", tuple(self.checks))
        # The status is a function of the checks (only `error`, "could not evaluate", stands on its own): a
        # verdict whose status was edited by hand cannot even be constructed.
        derived, _ = derive_status(self.checks)
        if self.status != "error" and self.status != derived:
            raise ValueError(f"status {self.status!r} does not follow from the checks (they give {derived!r})")
        object.__setattr__(self, "stats", tuple(self.stats))
        object.__setattr__(self, "versions", MappingProxyType(dict(self.versions)))
        details = _plain(self.details) if is_dataclass(self.details) else dict(self.details)
        object.__setattr__(self, "details", MappingProxyType(details))
        object.__setattr__(self, "registry_tags", MappingProxyType(dict(self.registry_tags)))
        object.__setattr__(self, "settings", MappingProxyType(dict(self.settings)))
        prefix = f"skewgate.{self.step}."
        stray = [k for k in self.registry_tags if not k.startswith(prefix)]
        if stray:
            raise ValueError(f"registry_tags must start with {prefix!r}, got {stray}")

    @classmethod
    def from_checks(
        cls,
        step: str,
        checks: Iterable[Check],
        *,
        subject: Subject | None,
        stats: Iterable[TensorStats] = (),
        details: Mapping[str, Any] | Any | None = None,
        registry_tags: Mapping[str, str] | None = None,
        versions: Mapping[str, str] | None = None,
    ) -> Verdict:
        """Derive the status: no checks → fail (empty means fail); a failed `fail` check → fail; else warn/pass.

        `details` is the step's own typed record (a dataclass, serialised field by field) or a plain mapping."""
        checks = tuple(checks)
        status, message = derive_status(checks)
        return cls(
            step=step,
            status=status,
            checks=checks,
            subject=subject,
            stats=tuple(stats),
            message=message,
            versions=versions if versions is not None else collect_versions(),
            details=details or {},
            registry_tags=registry_tags or {},
        )

    @classmethod
    def error(cls, step: str, message: str, *, subject: Subject | None = None) -> Verdict:
        """The verdict written when a step could not evaluate (exit code 2)."""
        return cls(step=step, status="error", checks=(), subject=subject, message=message,
                   versions=collect_versions())

    def judged_with(self, options: Any) -> Verdict:
        """This verdict, saying the settings it was judged with: `options` (the step's options dataclass, or a
        mapping) as JSON — nested dataclasses and mappings as objects, tuples as lists, paths and non-finite
        numbers as text. An options object with a `judged_settings()` method says them itself (compare: the
        thresholds in force, not the overrides as typed)."""
        said = options.judged_settings() if hasattr(options, "judged_settings") else options
        plain = settings_json(said)
        if not isinstance(plain, dict):
            raise TypeError(f"settings must be a dataclass or a mapping, got {type(options).__name__}")
        return replace(self, settings=plain)

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
        data = {
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
            "registry_tags": dict(self.registry_tags),
            "settings": settings_json(self.settings),
        }
        if self.schema_version < 3:  # no settings before version 3
            data.pop("settings")
        if self.schema_version == 1:  # the old layout, so that a stored v1 verdict re-serialises to its own bytes
            tags = data.pop("registry_tags")
            if tags:
                data["details"]["registry_tags"] = tags
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, allow_nan=False)

    def to_bytes(self) -> bytes:
        """The verdict file's exact bytes (what `write` writes and `digest` hashes)."""
        return (self.to_json() + "\n").encode("utf-8")

    def digest(self) -> str:
        """SHA-256 of `to_bytes()`: equal for equal verdicts, whoever wrote the file."""
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<verdict>") -> Verdict:
        """Parse strictly: every field typed (a bool is a bool, an int an int), no unknown fields, and a status
        that follows from the checks. Anything else is an `InputError` naming the field."""
        top = Fields(data, source=source, where="")
        version = top.integer("schema_version")
        if version not in READABLE_VERSIONS:
            raise InputError(source, field="schema_version", expected=", ".join(map(str, READABLE_VERSIONS)),
                             found=repr(version))
        subject_fields = top.optional_object("subject")
        checks = [_check(item) for item in top.objects("checks")]
        stats = [_stats(item) for item in top.objects("stats")]
        subject = None if subject_fields is None else Subject(
            artifact=subject_fields.string("artifact"), sha256=subject_fields.sha256("sha256"),
            data=subject_fields.str_map("data"), source=subject_fields.optional_string("source"),
            source_sha256=subject_fields.optional_string("source_sha256"))
        if subject_fields is not None:
            subject_fields.done()
        step, status = top.string("step"), top.choice("status", STATUSES)
        details = dict(top.json_object("details"))
        if version == 1:
            tags = details.pop("registry_tags", {})
            if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
                raise InputError(source, field="details.registry_tags", expected="an object of strings",
                                 found=type(tags).__name__)
        else:
            tags = top.str_map("registry_tags")
        settings = top.json_object("settings") if version >= 3 else {}
        try:
            verdict = cls(step=step, status=status, checks=tuple(checks), subject=subject,
                          stats=tuple(stats), message=top.string("message"), versions=top.str_map("versions"),
                          details=details, registry_tags=tags, settings=settings, created_at=top.string("created_at"),
                          schema_version=version)
        except ValueError as err:
            raise InputError(source, field="status" if "status" in str(err) else "registry_tags"
                             if "registry_tags" in str(err) else "step",
                             expected="a status that follows from the checks, a plain, unreserved step name and "
                                      "registry tags under skewgate.<step>.",
                             found=str(err)) from err
        top.done()
        return verdict

    @classmethod
    def read(cls, path: str | Path) -> Verdict:
        return cls.read_with_bytes(path)[0]

    @classmethod
    def read_with_bytes(cls, path: str | Path) -> tuple[Verdict, bytes]:
        """The verdict, and the very bytes it was parsed from (to digest and store without reading the file
        again). The file must be a regular file of at most `MAX_VERDICT_BYTES` (`io.read_regular_file`: a FIFO
        or a device in a verdicts folder is refused, never read)."""
        from skewgate.common.documents import parse_json
        from skewgate.common.io import read_regular_file

        path = Path(path)
        raw = read_regular_file(path, limit=MAX_VERDICT_BYTES, expected="a verdict JSON file")
        data = parse_json(raw, source=str(path), expected="a verdict JSON file")
        return cls.from_dict(data, source=str(path)), raw


def json_schema() -> dict[str, Any]:
    """The verdict's JSON Schema (draft 2020-12), shipped in the package as `verdict.schema.json`."""
    from importlib import resources

    schema: dict[str, Any] = json.loads(resources.files("skewgate.common").joinpath("verdict.schema.json")
                                        .read_text(encoding="utf-8"))
    return schema


def derive_status(checks: Iterable[Check]) -> tuple[Status, str]:
    """The status the checks give, and why: no checks → fail (empty means fail); a failed `fail` check → fail;
    a failed `warn` check → warn; else pass."""
    checks = tuple(checks)
    failed = [c for c in checks if not c.passed]
    if not checks:
        return "fail", "no checks were evaluated"
    if any(c.severity == "fail" for c in failed):
        return "fail", "failed: " + ", ".join(c.name for c in failed if c.severity == "fail")
    if failed:
        return "warn", "warnings: " + ", ".join(c.name for c in failed)
    return "pass", f"all {len(checks)} checks passed"


def _check(fields: Fields) -> Check:
    check = Check(name=fields.string("name"), passed=fields.boolean("passed"),
                  value=fields.optional_number("value"), limit=fields.optional_number("limit"),
                  detail=fields.string("detail"),
                  severity=fields.choice("severity", SEVERITIES))
    fields.done()
    return check


def _stats(fields: Fields) -> TensorStats:
    numbers = {name: fields.optional_number(name)
               for name in ("min", "max", "mean", "std", "p01", "p50", "p99", "p999", "zero_fraction")}
    stats = TensorStats(name=fields.string("name"), stage=fields.string("stage"),
                        shape=tuple(fields.ints("shape")), dtype=fields.string("dtype"),
                        count=fields.integer("count"), nan_count=fields.integer("nan_count"),
                        inf_count=fields.integer("inf_count"), sha256=fields.string("sha256"), **numbers)
    fields.done()
    return stats


def asdict_shallow(obj: Any) -> dict[str, Any]:
    """Field → value, without `dataclasses.asdict`'s deep copy (which cannot copy read-only mappings)."""
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def plain_details(details: Mapping[str, Any] | DataclassInstance) -> dict[str, Any]:
    """`details` as a verdict holds them: a step's typed details dataclass field by field (a None field marked
    `OMIT_IF_NONE` left out), read-only mappings and tuples as dicts and lists. For `Verdict(details=...)` and
    `dataclasses.replace`, whose `details` is a mapping (`from_checks` takes the dataclass itself)."""
    plain: dict[str, Any] = _plain(details)
    return plain


def _plain(value: Any) -> Any:
    """Turn read-only mappings and tuples from `details` back into JSON-able dicts and lists."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)
                if not (getattr(value, f.name) is None and f.metadata.get("omit_if_none"))}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def settings_json(value: Any) -> Any:
    """`value` as plain JSON: dataclasses and mappings as objects (keys as text), tuples and lists as lists, paths
    and anything else as text, non-finite floats as text ("inf": JSON has no infinity)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: settings_json(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): settings_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [settings_json(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


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
