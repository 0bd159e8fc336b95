"""The one entry of `skewgate verify`: resolve the registry, load the trusted keys, re-check the champion."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from skewgate.common.errors import SkewgateError
from skewgate.common.steps import DEFAULT_ALIAS, RELEASE_GATE_STEPS
from skewgate.common.verdict import Verdict

STEP = "verify"


@dataclass(frozen=True, kw_only=True)
class VerifyOptions:
    """Every default of `skewgate verify` lives here."""

    alias: str = DEFAULT_ALIAS
    trusted_keys: tuple[str, ...] = ()  # public key files; $SKEWGATE_TRUSTED_KEYS adds more
    # the steps promote's signed decision must have required, at least: by default every release-gate step
    required: tuple[str, ...] = RELEASE_GATE_STEPS
    mlflow_deadline_s: float = 30.0  # give up on an unreachable registry after this long (as every step does)
    # a policy file (common/policy.py): its `required` wins over `required`, and every stored verdict must meet its
    # settings bounds; "" = the release gate's defaults
    policy: str = ""


def run(*, model_name: str, tracking_uri: str, options: VerifyOptions) -> Verdict:
    """Re-check the `options.alias` version of `model_name` in the registry at `tracking_uri`. Never raises:
    what could not be checked (no registry, no key, an unknown step, registry down) is an `error` verdict."""
    try:
        from skewgate.common import attest, mlflow_log
        from skewgate.common.policy import GatePolicy, load_policy
        from skewgate.common.steps import resolve_steps
        from skewgate.verify.core import verify_champion

        required = resolve_steps(options.required, source="--require")
        gates = load_policy(options.policy, required=required) if options.policy else GatePolicy(required=required)
        trusted = attest.load_trusted_keys(attest.trusted_key_paths(options.trusted_keys))
        if not tracking_uri:
            raise SkewgateError("no registry: set --tracking-uri or MLFLOW_TRACKING_URI")
        source = mlflow_log.RegistryChampions(tracking_uri, deadline_s=options.mlflow_deadline_s)
        with tempfile.TemporaryDirectory() as workdir:
            return verify_champion(model_name=model_name, alias=options.alias, source=source, trusted=trusted,
                                   workdir=Path(workdir), gates=gates)
    except SkewgateError as err:  # skewgate's own errors only: anything else is a bug and must show as one
        return Verdict.error(STEP, str(err))
