"""The parts of a step's `details` that something other than the step reads, typed in one place: the writer and
the readers share the field names, so a renamed field is a type error rather than a key that silently reads
nothing. promote writes its details from `PromoteDetails`; a pipeline's outcome (`common.outcome`) reads the
promoted version and the reason back through `PromoteDetails.of`. Nightly drift's details
(`drift.core.NightlyDetails`) hold `NightRecord`'s fields among its statistics; the outcome and MLflow's nightly
series read the judged version and the night's date through `NightRecord.of`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from skewgate.common.verdict import Verdict

Details = TypeVar("Details", bound="DataclassInstance")


@dataclass(frozen=True)
class PromoteDetails:
    """promote's `details`: what was decided about which version."""

    model_name: str
    version: str
    alias: str
    promoted: bool
    previous_alias_version: str | None
    reason: str
    outcome_tags_written: bool
    int8_version: str | None
    step_version: str | None = None  # `<model_name>-step`'s version, for a stateful model
    policy: Mapping[str, Any] = field(default_factory=dict)  # `Policy.describe()`
    outcome: str = ""  # promoted | refused | lost | error: what the alias read back showed
    alias_version: str | None = None  # the version the alias held when this promotion settled
    log_written: bool = True

    @classmethod
    def of(cls, verdict: Verdict) -> PromoteDetails | None:
        """What a promote verdict's details say; None when they do not say it (an `error` verdict has none)."""
        return _read(cls, verdict)


@dataclass(frozen=True, kw_only=True)
class NightRecord:
    """What a nightly drift verdict says of its night besides the statistics."""

    model_version: str  # the `alias` version whose profile was the reference, tagged with the night
    run_date: str  # ISO 8601: the night's scheduled time, or when it ran

    @classmethod
    def of(cls, verdict: Verdict) -> NightRecord | None:
        """The night a nightly drift verdict judged; None when its details do not say (an `error` verdict)."""
        return _read(cls, verdict)


def _read(cls: type[Details], verdict: Verdict) -> Details | None:
    """`cls` from the same-named keys of `verdict.details` (others ignored); None when one that has no default is
    missing."""
    known = {f.name: verdict.details[f.name] for f in fields(cls) if f.name in verdict.details}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    return cls(**known) if required <= known.keys() else None
