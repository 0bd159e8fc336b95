"""Promotion: a pure decision over verdicts, then the registry side, failing closed at every point.

`decide` judges the evidence: every required step has a verdict, each passed (`warn` only when allowed), and
each verdict is about the very file being promoted (its subject SHA-256 equals the digest recomputed now).
`promote` then registers or finds the model version, writes the evidence tags, reads them back, and only then
moves the alias. A refusal tags the version with the reason and leaves the alias where it was.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from skewgate.common.errors import BackendError, InputError
from skewgate.common.io import load_onnx, sha256_file
from skewgate.common.verdict import Check, Subject, Verdict

log = logging.getLogger(__name__)
STEP = "promote"
DEFAULT_REQUIRED: tuple[str, ...] = ("export",)


class Registry(Protocol):
    """What promote needs of a model registry (MLflow's in production, an in-memory fake in unit tests)."""

    def model_exists(self, name: str) -> bool: ...
    def version_exists(self, name: str, version: str) -> bool: ...
    def find_version(self, name: str, sha256: str) -> str | None: ...
    def register(self, name: str, artifact: Path, sha256: str) -> str: ...
    def get_tags(self, name: str, version: str) -> dict[str, str]: ...
    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None: ...
    def get_alias(self, name: str, alias: str) -> str | None: ...
    def set_alias(self, name: str, alias: str, version: str) -> None: ...
    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None: ...


def load_verdicts(directory: str | Path) -> dict[str, tuple[Verdict, str]]:
    """Every `*.json` verdict in `directory`, keyed by step, with the SHA-256 of its file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, expected="a directory of verdict JSON files", found="no such directory")
    verdicts: dict[str, tuple[Verdict, str]] = {}
    for path in sorted(directory.glob("*.json")):
        verdict = Verdict.read(path)
        if verdict.step in verdicts:
            raise InputError(path, field="step", expected="one verdict per step",
                             found=f"a second verdict for {verdict.step!r}")
        verdicts[verdict.step] = (verdict, sha256_file(path))
    return verdicts


def decide(
    verdicts: Mapping[str, Verdict],
    *,
    artifact_sha256: str,
    required: Sequence[str] = DEFAULT_REQUIRED,
    allow_warn: bool = False,
) -> list[Check]:
    """One check per required step: present, acceptable status, and about this exact artifact."""
    if not required:
        return []  # empty means fail: Verdict.from_checks turns no checks into `fail`
    accepted = {"pass", "warn"} if allow_warn else {"pass"}
    checks = []
    for step in required:
        verdict = verdicts.get(step)
        if verdict is None:
            checks.append(Check(f"evidence.{step}", passed=False, detail="no verdict for this required step"))
            continue
        status_ok = verdict.status in accepted
        digest = verdict.subject.sha256 if verdict.subject else None
        digest_ok = digest == artifact_sha256
        reasons = []
        if not status_ok:
            reasons.append(f"status {verdict.status}: {verdict.message}")
        if not digest_ok:
            reasons.append(f"verdict judged sha256 {digest or '(none)'} but the file to promote is "
                           f"{artifact_sha256}")
        checks.append(Check(f"evidence.{step}", passed=status_ok and digest_ok, value=float(status_ok and digest_ok),
                            limit=1.0, detail="; ".join(reasons) or f"{verdict.status}, same artifact"))
    return checks


def promote(
    *,
    model_name: str,
    onnx: str | Path,
    verdicts_dir: str | Path,
    registry: Registry,
    alias: str = "champion",
    required: Sequence[str] = DEFAULT_REQUIRED,
    allow_warn: bool = False,
    version: str | None = None,
) -> Verdict:
    """Decide, then act on the registry. Bad input raises `InputError` before the registry is touched."""
    onnx = Path(onnx)
    load_onnx(onnx)  # a truncated or non-ONNX file is bad input, not a refusal
    sha = sha256_file(onnx)
    loaded = load_verdicts(verdicts_dir)
    verdicts = {step: v for step, (v, _) in loaded.items()}
    if version is not None:
        if not registry.model_exists(model_name):
            raise InputError("--model-name", field=model_name, expected="a registered model",
                             found="no such registered model")
        if not registry.version_exists(model_name, version):
            raise InputError("--version", field=version, expected=f"a version of {model_name}",
                             found="no such version")

    checks = decide(verdicts, artifact_sha256=sha, required=required, allow_warn=allow_warn)
    if version is None:
        version = registry.find_version(model_name, sha) or registry.register(model_name, onnx, sha)
    else:
        registered_sha = registry.get_tags(model_name, version).get("skewgate.onnx_sha256")
        checks.append(Check("registry.same_artifact", passed=registered_sha == sha,
                            detail=f"version {version} carries sha256 {registered_sha or '(none)'}, file is {sha}"))
    decision = Verdict.from_checks(STEP, checks, subject=Subject(artifact=str(onnx), sha256=sha))
    promoted = decision.status == "pass"
    reason = "all required evidence passed" if promoted else _reason(decision)

    tags = {"skewgate.onnx_sha256": sha, "skewgate.promotion.status": "promoted" if promoted else "refused",
            "skewgate.promotion.reason": reason[:5000]}
    for step, (verdict, verdict_sha) in loaded.items():
        tags[f"skewgate.{step}.status"] = verdict.status
        tags[f"skewgate.verdict_sha256.{step}"] = verdict_sha
        # a step may ask for evidence beside its verdict on the version (drift: where its profile lives)
        extra = verdict.details.get("registry_tags", {})
        tags.update({str(k): str(v) for k, v in extra.items() if str(k).startswith(f"skewgate.{step}.")})
    registry.set_tags(model_name, version, tags)
    readback = registry.get_tags(model_name, version)
    differing = sorted(k for k, v in tags.items() if readback.get(k) != v)
    if differing:
        raise BackendError(f"registry tags of {model_name} v{version} did not read back: {differing}; "
                           f"alias {alias!r} not moved")
    previous = registry.get_alias(model_name, alias)
    if promoted:
        registry.set_alias(model_name, alias, version)
        if registry.get_alias(model_name, alias) != version:
            raise BackendError(f"alias {alias!r} of {model_name} did not read back as version {version}")
    record = {"at": datetime.now(UTC).isoformat(timespec="seconds"), "model": model_name, "version": version,
              "alias": alias, "sha256": sha, "promoted": promoted, "reason": reason, "previous": previous,
              "verdicts": {step: v.status for step, v in verdicts.items()}}
    registry.append_promotion_log(model_name, record)
    log.info("%s v%s: %s (%s)", model_name, version, "promoted" if promoted else "refused", reason)
    details = {"model_name": model_name, "version": version, "alias": alias, "promoted": promoted,
               "previous_alias_version": previous, "reason": reason}
    return Verdict(step=STEP, status=decision.status, checks=decision.checks, subject=decision.subject,
                   message=f"{'promoted' if promoted else 'refused'}: {reason}", versions=decision.versions,
                   details=details)


def _reason(decision: Verdict) -> str:
    if not decision.checks:
        return "no required steps: nothing to base a promotion on"
    return "; ".join(f"{c.name}: {c.detail}" for c in decision.failed_checks)
