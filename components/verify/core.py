"""Re-check a champion from the registry alone: what a deployment runs before it loads the model.

Resolve the alias to a version; recompute the SHA-256 of the ONNX file inside the registered MLflow Model and
compare it with the version's evidence tag; open promote's signed decision (it must be by a trusted key, say
`pass`, and name this version and digest); then every required step's stored verdict must be signed by a
trusted key, about this digest, acceptable under the recorded policy, and the very verdict promote recorded.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

from skewgate.common import attest
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.mlflow_log import Champion
from skewgate.common.verdict import Check, Subject, Verdict

STEP = "verify"


class ChampionSource(Protocol):
    """Where the champion comes from (the MLflow registry in production)."""

    def fetch(self, name: str, alias: str, workdir: Path) -> Champion | None: ...


def verify_champion(*, model_name: str, alias: str, source: ChampionSource, trusted: dict[str, Any],
                    workdir: Path) -> Verdict:
    if not trusted:
        raise InputError("--trusted-key", expected="at least one trusted public key", found="none")
    champion = source.fetch(model_name, alias, workdir)
    if champion is None:
        return Verdict.from_checks(STEP, [Check("champion.resolved", passed=False,
                                                detail=f"{model_name} has no alias {alias!r}")], subject=None)
    expected = champion.tags.get("skewgate.onnx_sha256", "")
    onnx_files = sorted(champion.model_dir.rglob("*.onnx"))
    digests = {str(p.relative_to(champion.model_dir)): sha256_file(p) for p in onnx_files}
    matching = [name for name, digest in digests.items() if digest == expected]
    checks = [Check("champion.resolved", passed=True, detail=f"{alias} → version {champion.version}"),
              Check("artifact.sha256", passed=bool(matching),
                    detail=f"{matching[0]} has the gated sha256 {expected}" if matching else
                    f"no ONNX file in version {champion.version} has sha256 {expected or '(no tag)'}: {digests}")]
    subject = Subject(artifact=f"models:/{model_name}/{champion.version}", sha256=expected or "0" * 64)
    if champion.attestations_dir is None:
        checks.append(Check("attestation.promotion", passed=False, detail="no skewgate.attestation.uri tag"))
        return Verdict.from_checks(STEP, checks, subject=subject)
    promotion, problem = _promotion(champion, trusted, expected)
    checks.append(Check("attestation.promotion", passed=not problem, detail=problem or "signed by a trusted key"))
    if promotion is not None:
        policy = promotion.get("policy", {})
        for step in policy.get("required", []):
            checks.append(_step_check(champion.attestations_dir, step, trusted, expected, policy,
                                      promotion.get("evidence", {}).get(step, {})))
    return Verdict.from_checks(STEP, checks, subject=subject)


def _promotion(champion: Champion, trusted: dict[str, Any], sha: str) -> tuple[dict[str, Any] | None, str]:
    assert champion.attestations_dir is not None
    try:
        envelope = attest.read_envelope(champion.attestations_dir / f"promotion{attest.ENVELOPE_SUFFIX}")
        statement, _ = attest.open_envelope(envelope, trusted)
    except (InputError, attest.SignatureInvalid) as err:  # InputError: not a regular file, or too large
        return None, f"promotion attestation: {err}"
    predicate = statement.get("predicate", {})
    digest = (statement.get("subject") or [{}])[0].get("digest", {}).get("sha256")
    if statement.get("predicateType") != attest.PROMOTION_PREDICATE:
        return None, f"predicateType {statement.get('predicateType')!r}"
    if digest != sha or predicate.get("version") != champion.version or predicate.get("decision") != "pass":
        return None, (f"the signed decision is {predicate.get('decision')!r} for version {predicate.get('version')} "
                      f"sha256 {digest}, not pass for version {champion.version} sha256 {sha}")
    return predicate, ""


def _step_check(folder: Path, step: str, trusted: dict[str, Any], sha: str, policy: dict[str, Any],
                recorded: dict[str, Any]) -> Check:
    name = f"evidence.{step}"
    try:
        verdict, content = Verdict.read_with_bytes(folder / f"{step}.json")
        envelope = attest.read_envelope(folder / f"{step}{attest.ENVELOPE_SUFFIX}")
        attest.verify_verdict(verdict, envelope, trusted, artifact_sha256=sha)
    except (InputError, attest.SignatureInvalid) as err:
        return Check(name, passed=False, detail=str(err))
    accepted = {"pass", "warn"} if policy.get("allow_warn") else {"pass"}
    if verdict.status not in accepted:
        return Check(name, passed=False, detail=f"status {verdict.status}")
    if hashlib.sha256(content).hexdigest() != recorded.get("verdict_sha256"):
        return Check(name, passed=False, detail="not the verdict promote's signed decision recorded")
    return Check(name, passed=True, detail=f"{verdict.status}, signed, same artifact")


