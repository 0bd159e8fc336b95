"""The one entry the CLI and the KFP component call: the registry (`tracking`), the model name and options in, a
verdict on the champion's stored evidence out. verify only reads: it records nothing, and what it could not check
is an `error` verdict."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from skewgate.common.errors import SkewgateError
from skewgate.common.interrupts import DeadlineExceeded, overall_deadline
from skewgate.common.recording import StepResult, TrackingOptions
from skewgate.common.steps import DEFAULT_ALIAS, RELEASE_GATE_STEPS
from skewgate.common.verdict import Verdict

OVERALL_GRACE_S = 5.0  # the whole of verify's registry work ends within --mlflow-deadline and this

STEP = "verify"


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    """Every default of `skewgate verify` and `verify_op` lives here (the registry and its deadline are `tracking`'s
    `uri` and `deadline_s`)."""

    alias: str = DEFAULT_ALIAS
    trusted_keys: tuple[str, ...] = ()  # public key files; $SKEWGATE_TRUSTED_KEYS adds more
    # the steps promote's signed decision must have required, at least: by default every release-gate step
    required: tuple[str, ...] = RELEASE_GATE_STEPS
    # a policy file (common/policy.py): its `required` wins over `required`, and every stored verdict must meet its
    # settings bounds; "" = the release gate's defaults
    policy: str = ""


def run(*, model_name: str, options: VerifyOptions, tracking: TrackingOptions) -> StepResult:
    """Re-check the `options.alias` version of `model_name` in the registry at `tracking.uri` (given up on after
    `tracking.deadline_s`). Fails closed and never raises for what could not be checked (no registry, no key, an
    unknown step, registry down): an `error` verdict. Only skewgate's own errors are caught: anything else is a bug
    and must show as one. Nothing is recorded (verify only reads the registry); the verdict is signed with
    `tracking.signing_key` (or `$SKEWGATE_SIGNING_KEY`) when one is set."""
    return StepResult.unrecorded(_verdict(model_name=model_name, options=options, tracking=tracking),
                                 tracking.signing_key)


def _verdict(*, model_name: str, options: VerifyOptions, tracking: TrackingOptions) -> Verdict:
    try:
        from skewgate.common import attest, mlflow_log
        from skewgate.common.policy import GatePolicy, load_policy
        from skewgate.common.steps import resolve_steps
        from skewgate.verify.core import verify_champion

        required = resolve_steps(options.required, source="--require")
        gates = (load_policy(options.policy, required=required) if options.policy
                 else GatePolicy(required=required)).promoting(options.alias)
        trusted = gates.trusted(attest.load_trusted_keys(attest.trusted_key_paths(options.trusted_keys)))
        if not tracking.uri:
            raise SkewgateError("no registry: set --tracking-uri or MLFLOW_TRACKING_URI")
        source = mlflow_log.RegistryChampions.connect(tracking.uri, deadline_s=tracking.deadline_s)
        # every registry read and download together within one deadline, not each read: a server that answers one
        # byte at a time would hold verify for ever. A few seconds more than the first lookup's own retry deadline,
        # so that a server that cannot be reached at all is reported as such (refused, timed out) first.
        with tempfile.TemporaryDirectory() as workdir, overall_deadline(
                tracking.deadline_s + OVERALL_GRACE_S, f"verify {model_name}@{options.alias} at {tracking.uri}"):
            return verify_champion(model_name=model_name, alias=options.alias, source=source, trusted=trusted,
                                   workdir=Path(workdir), gates=gates)
    except (SkewgateError, DeadlineExceeded) as err:
        return Verdict.error(STEP, str(err))
