"""Promotion: a pure decision over signed evidence, then the registry side, failing closed at every point.

`decide` judges the evidence. For every required step: a verdict exists; its status (re-derived from its checks
when it was read) is `pass` (`warn` only when allowed); it is about the very file being promoted (its subject
SHA-256 equals the digest recomputed now); a trusted key signed exactly that verdict about exactly that digest;
and, inside a pipeline run, it was signed for that pipeline run (no replay from another run) and no later verdict
of the step signed for that run supersedes it (a retry counts its latest attempt). Only signed statements are
evidence: MLflow tags, and which run holds which envelope, are not.

`promote` then acts on the registry in an order chosen so that a crash anywhere leaves the alias where it was
or on a version whose evidence is complete: every input (model name, alias by MLflow's rules, steps, evidence)
validated → version (found by digest, or registered) → evidence tags and the signed attestations, read back →
the alias, then settled (below) → the promotion-log record, stating what the read-back showed → the outcome
tags. A refusal never rewrites the evidence of the version the alias points at.

Contention (last writer wins): every promotion announces itself (its MLflow run, RUNNING, names its target
`name@alias`, its process and, once known, its version). After moving the alias a promotion waits `SETTLE_S`,
then re-reads it: when it holds another version, this one lost the race to that version (exit 2, logged as
such); when it holds ours, it still waits while a promotion of another version to the same alias is under way
(announced, RUNNING, its process alive), since that one may write last. So of concurrent promotions of different
artifacts exactly one exits 0: the one whose version the alias holds when they have all finished.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skewgate.common import attest
from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import BackendError, Inconsistent, InputError, check_read_back
from skewgate.common.io import load_onnx, sha256_file
from skewgate.common.policy import GatePolicy
from skewgate.common.registry import Registry
from skewgate.common.step_details import PromoteDetails  # in common: a pipeline's outcome reads it back
from skewgate.common.verdict import Check, Status, Subject, Verdict, plain_details

log = logging.getLogger(__name__)
STEP = "promote"
INT8_SUFFIX = conv.INT8_SUFFIX
STEP_SUFFIX = conv.STEP_SUFFIX
# The steps that judge the served file: for a stateful model that is the STEP model, not the promoted FULL one
SERVED_BY = ("probe",)
SETTLE_S = 1.0  # after moving the alias, before reading it back: a concurrent write lands within this
POLL_S = 0.5  # while another promotion to the same alias is under way
CONTENTION_WAIT_S = 300.0  # the longest a promotion holding the alias waits for the others to finish
_ALIAS = re.compile(r"[\w-]{1,255}")  # MLflow's alias characters; fullmatch: no trailing newline slips through
_RESERVED_ALIAS = re.compile(r"[vV]\d+|latest", re.IGNORECASE)  # MLflow resolves these as versions


def validate_target(model_name: str, alias: str) -> None:
    """The model name and the alias by MLflow's rules (mlflow.utils.validation), checked before anything is
    written: an `InputError` naming the option otherwise. MLflow's own alias check accepts a trailing newline
    (`re.match` with `$`); this one does not."""
    if not model_name.strip() or any(c in model_name for c in "/:") or \
            any(ord(c) < 32 or ord(c) == 127 for c in model_name) or \
            model_name.strip() != model_name or model_name in (".", "..") or len(model_name) > 250:
        raise InputError("--model-name", expected="a registered model name: not blank, no '/', ':', control "
                         "characters or surrounding spaces, at most 250 characters", found=repr(model_name))
    if not _ALIAS.fullmatch(alias):
        raise InputError("--alias", expected="an MLflow alias: 1 to 255 letters, digits, '_' or '-'",
                         found=repr(alias))
    if _RESERVED_ALIAS.fullmatch(alias):
        raise InputError("--alias", expected="an alias MLflow does not reserve ('latest' and 'v<N>' name "
                         "versions)", found=repr(alias))


@dataclass(frozen=True)
class Evidence:
    """One step's verdict as read from the verdicts folder, with its signed envelope when there is one."""

    verdict: Verdict
    path: Path
    content: bytes = field(repr=False)  # the verdict file's bytes as read once: digested and stored, never re-read
    envelope: dict[str, Any] | None = None
    envelope_problem: str = ""  # why there is no usable envelope

    @property
    def sha256(self) -> str:
        """Of the verdict file's bytes."""
        return hashlib.sha256(self.content).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What promote requires: the gates' policy (steps, whether `warn` passes, the loosest settings, required
    checks: `common.policy`), whose signatures count, and the pipeline run."""

    gates: GatePolicy
    trusted_keys: Mapping[str, Any] | None = None  # key id → Ed25519 public key
    allow_unsigned: bool = False
    pipeline_run_id: str = ""

    @property
    def required(self) -> tuple[str, ...]:
        return self.gates.required

    @property
    def allow_warn(self) -> bool:
        return self.gates.allow_warn

    def describe(self) -> dict[str, Any]:
        return {**self.gates.describe(), "trusted_keys": sorted(self.trusted_keys or {}),
                "allow_unsigned": self.allow_unsigned, "pipeline_run_id": self.pipeline_run_id}


def load_evidence(directory: str | Path) -> dict[str, Evidence]:
    """Every `*.json` verdict in `directory` by step, with `<stem>.intoto.jsonl` beside it when present.

    Each file is read once, as a regular file of bounded size (`Verdict.read_with_bytes`, `attest.read_envelope`): a
    FIFO, a device, a directory or an oversized file among them is an `InputError` naming it."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(directory, expected="a directory of verdict JSON files", found="no such directory")
    evidence: dict[str, Evidence] = {}
    for path in sorted(directory.glob("*.json")):
        verdict, content = Verdict.read_with_bytes(path)
        if verdict.step in evidence:
            raise InputError(path, field="step", expected="one verdict per step",
                             found=f"a second verdict for {verdict.step!r}")
        try:
            envelope, problem = attest.read_envelope(attest.envelope_path(path)), ""
        except attest.SignatureInvalid as err:
            envelope, problem = None, str(err)
        evidence[verdict.step] = Evidence(verdict, path, content, envelope, problem)
    return evidence


def decide(evidence: Mapping[str, Evidence], *, artifact_sha256: str, policy: Policy,
           logged: Sequence[Mapping[str, Any]] = (), served_sha256: str | None = None) -> list[Check]:
    """One check per required step: its verdict passed, was judged within the policy's settings bounds, holds
    the checks the policy requires, is about this artifact and signed. `served_sha256`: a stateful model's STEP
    model, the file the steps of `SERVED_BY` judge instead of the promoted one. Inside a pipeline run
    (`policy.pipeline_run_id`) each verdict must be signed for that run, and `logged` (the envelopes MLflow holds
    for it, unverified) must hold no later verdict of the step signed for that run; an envelope no trusted key
    signed for this run is ignored."""
    accepted = {"pass", "warn"} if policy.allow_warn else {"pass"}
    checks = []
    for step in policy.required:  # no required steps → no checks → fail (empty means fail)
        item = evidence.get(step)
        if item is None:
            checks.append(Check(f"evidence.{step}", passed=False, detail="no verdict for this required step"))
            continue
        verdict, reasons = item.verdict, []
        if verdict.status not in accepted:
            reasons.append(f"status {verdict.status}: {verdict.message}")
        expected, what = ((served_sha256, "the STEP model served") if served_sha256 and step in SERVED_BY
                          else (artifact_sha256, "the file to promote"))
        digest = verdict.subject.sha256 if verdict.subject else None
        if digest != expected:
            reasons.append(f"verdict judged sha256 {digest or '(none)'} but {what} is {expected}")
        reasons += policy.gates.problems(verdict)
        reasons += _signature_problems(item, expected, policy, logged)
        checks.append(Check(f"evidence.{step}", passed=not reasons, value=float(not reasons), limit=1.0,
                            detail="; ".join(reasons) or f"{verdict.status}, same artifact"
                            + (", signed" if item.envelope is not None and policy.trusted_keys else "")))
    return checks


def _signature_problems(item: Evidence, artifact_sha256: str, policy: Policy,
                        logged: Sequence[Mapping[str, Any]]) -> list[str]:
    if not policy.trusted_keys:
        return [] if policy.allow_unsigned else ["no trusted public keys given: unsigned evidence is refused "
                                                 "(--trusted-key, or --allow-unsigned for local experiments)"]
    if item.envelope is None:
        return [item.envelope_problem or "unsigned"]
    try:
        signed = attest.verified_verdict(item.verdict, item.envelope, policy.trusted_keys,
                                         artifact_sha256=artifact_sha256, pipeline_run_id=policy.pipeline_run_id)
    except attest.SignatureInvalid as err:
        return [f"signature: {err}"]
    if policy.pipeline_run_id:
        later = _later_signed_verdict(signed, logged, policy)
        if later is not None:
            return [f"superseded: pipeline run {policy.pipeline_run_id} holds a later signed {signed.step} verdict "
                    f"({later.status}, step run {later.context.step_run_id or '(none)'}) than this one (step run "
                    f"{signed.context.step_run_id or '(none)'}); a retry counts its latest attempt"]
    return []


def _later_signed_verdict(signed: attest.SignedVerdict, logged: Sequence[Mapping[str, Any]],
                          policy: Policy) -> attest.SignedVerdict | None:
    """The newest verdict of the same step a trusted key signed for this pipeline run, when it is not `signed`
    (a tie between two different statements is not resolved in the presented one's favour)."""
    assert policy.trusted_keys
    newest: attest.SignedVerdict | None = None
    for envelope in logged:
        try:
            other = attest.open_verdict(envelope, policy.trusted_keys)
        except (attest.SignatureInvalid, AttributeError, TypeError, ValueError):
            continue  # unsigned, forged or malformed: not evidence, whatever run holds it
        if other.step != signed.step or other.context.pipeline_run_id != policy.pipeline_run_id \
                or other.statement == signed.statement:
            continue
        if other.context.recorded_at_ms >= signed.context.recorded_at_ms and \
                (newest is None or other.context.recorded_at_ms > newest.context.recorded_at_ms):
            newest = other
    return newest


def promote(
    *,
    model_name: str,
    onnx: str | Path,
    verdicts_dir: str | Path,
    registry: Registry,
    policy: Policy,
    alias: str,
    version: str | None = None,
    signing_key: attest.SigningKey | None = None,
    int8: str | Path | None = None,
    step: str | Path | None = None,
) -> Verdict:
    """Decide, then act on the registry. Bad input raises `InputError` before the registry is touched (every
    evidence file is read, whole and once, before the first registry call).

    With `int8`, the INT8 model is registered beside the FP32 one as `<model_name>-int8` (its own versions,
    digest and alias: serving code picks a precision by model name) — only when calibrate and parity both
    judged exactly that file (their signed verdicts name its SHA-256), and its alias moves with the FP32 one.

    With `step` (a stateful model's STEP model, the file served one step at a time with its state fed back), the
    probe's verdict must be about that file, and parity's must have judged it in stream mode against the promoted
    (FULL) one; it is registered beside as `<model_name>-step` the same way as the INT8 model.
    """
    inputs = _read_inputs(model_name=model_name, alias=alias, onnx=onnx, verdicts_dir=verdicts_dir, policy=policy,
                          int8=int8, step=step)
    if version is not None:
        _require_version(registry, model_name, version)
    checks = _evidence_checks(registry, inputs)
    registry.announce(model_name, alias)  # a contender from here on (see "Contention" above)
    if version is None:
        version = (registry.find_version(model_name, inputs.sha)
                   or registry.register(model_name, inputs.onnx, inputs.sha))
    else:
        checks.append(_same_artifact_check(registry, model_name, version, inputs.sha))
    decision = Verdict.from_checks(STEP, checks, subject=Subject(artifact=str(inputs.onnx), sha256=inputs.sha))
    promoted = decision.status == "pass"
    previous = registry.get_alias(model_name, alias)
    # Refusing the very file the alias serves must not relabel the champion: its evidence stays as it was.
    protected = not promoted and previous == version
    attestation_uri = "" if protected else _record_evidence(registry, inputs, version, decision, signing_key)
    result = (_take_alias(registry, inputs, version, previous, attestation_uri) if promoted else
              _Result(outcome="refused", status=decision.status, reason=_reason(decision), previous=previous,
                      holder=previous))
    log_written = _log_promotion(registry, inputs, version, result)
    outcome_written = protected or _write_outcome(registry, model_name, version, alias, result.won, result.reason,
                                                  description(inputs.evidence, decision, policy,
                                                              outcome=result.outcome))
    log.info("%s v%s: %s (%s)", model_name, version, result.outcome, result.reason)
    return _verdict(inputs, version, decision, result, outcome_written=outcome_written, log_written=log_written)


@dataclass(frozen=True, kw_only=True)
class _Inputs:
    """A promotion's inputs, validated and read (every file whole and once) before the registry is touched."""

    model_name: str
    alias: str
    onnx: Path
    sha: str  # of `onnx`
    evidence: Mapping[str, Evidence]
    companions: tuple[Companion, ...]  # the INT8 and STEP models given
    policy: Policy

    @property
    def step_sha(self) -> str | None:
        """The STEP model's digest, when one is given: the file the steps of `SERVED_BY` judge."""
        return next((c.sha256 for c in self.companions if c.suffix == STEP_SUFFIX), None)


def _read_inputs(*, model_name: str, alias: str, onnx: str | Path, verdicts_dir: str | Path, policy: Policy,
                 int8: str | Path | None, step: str | Path | None) -> _Inputs:
    """The target names by MLflow's rules, the models and the evidence: an `InputError` for any bad one."""
    validate_target(model_name, alias)
    companions: list[Companion] = []
    for suffix, path, folder in ((INT8_SUFFIX, int8, "model-int8"), (STEP_SUFFIX, step, "model-step")):
        if path is not None:
            validate_target(f"{model_name}{suffix}", alias)
            load_onnx(path)
            companions.append(Companion(suffix, Path(path), sha256_file(path), folder))
    onnx = Path(onnx)
    load_onnx(onnx)  # a truncated or non-ONNX file is bad input, not a refusal
    sha = sha256_file(onnx)
    evidence = load_evidence(verdicts_dir)
    return _Inputs(model_name=model_name, alias=alias, onnx=onnx, sha=sha, evidence=evidence,
                   companions=tuple(companions), policy=policy)


def _require_version(registry: Registry, model_name: str, version: str) -> None:
    """A version given is an input: an `InputError` when the model or the version does not exist."""
    if not registry.model_exists(model_name):
        raise InputError("--model-name", field=model_name, expected="a registered model",
                         found="no such registered model")
    if not registry.version_exists(model_name, version):
        raise InputError("--version", field=version, expected=f"a version of {model_name}",
                         found="no such version")


def _evidence_checks(registry: Registry, inputs: _Inputs) -> list[Check]:
    """`decide`'s checks, then one per companion: it is the file its steps judged."""
    policy = inputs.policy
    # Unsigned tags are never evidence: only envelopes, and only what a trusted key signed in them, count.
    logged = (registry.logged_verdict_envelopes(policy.pipeline_run_id)
              if policy.pipeline_run_id and policy.trusted_keys else [])
    checks = decide(inputs.evidence, artifact_sha256=inputs.sha, policy=policy, logged=logged,
                    served_sha256=inputs.step_sha)
    if "compare" in policy.required and "compare" in inputs.evidence:
        checks.append(compared_champion_check(inputs.evidence["compare"].verdict, registry=registry.identity,
                                              model_name=inputs.model_name, alias=inputs.alias,
                                              holder=registry.get_alias(inputs.model_name, inputs.alias)))
    checks += [(int8_check if c.suffix == INT8_SUFFIX else stream_check)(inputs.evidence, c.sha256)
               for c in inputs.companions]
    return checks


def _same_artifact_check(registry: Registry, model_name: str, version: str, sha: str) -> Check:
    """A version given must carry the digest of the file to promote."""
    registered_sha = registry.get_tags(model_name, version).get(conv.ONNX_DIGEST_TAG)
    return Check("registry.same_artifact", passed=registered_sha == sha,
                 detail=f"version {version} carries sha256 {registered_sha or '(none)'}, file is {sha}")


def _record_evidence(registry: Registry, inputs: _Inputs, version: str, decision: Verdict,
                     signing_key: attest.SigningKey | None) -> str:
    """The version's evidence tags and the signed attestations, read back before the alias moves: the URI of
    the attestations stored."""
    name, alias = inputs.model_name, inputs.alias
    judged = {c.name.removeprefix("evidence.") for c in decision.checks if c.passed and c.name.startswith("evidence.")}
    tags = evidence_tags(inputs.evidence, inputs.sha, judged)
    tags.update(_attest(registry, name, version, inputs.evidence, decision, inputs.policy, signing_key, alias,
                        served=inputs.step_sha))
    registry.set_tags(name, version, tags)
    readback = registry.get_tags(name, version)
    # A concurrent promotion of the same file may have stored its own (equally valid) attestations since:
    # the URI must be there, not necessarily ours.
    uri_tag = conv.attestation_uri_tag(alias)
    check_read_back(f"registry tags of {name} v{version} (alias {alias!r} not moved)", tags, readback,
                    present_only={uri_tag})
    return tags[uri_tag]


@dataclass(frozen=True, kw_only=True)
class _Result:
    """Where a promotion ended: what the promotion-log record, the outcome tags and the verdict report."""

    outcome: str  # "promoted", "refused", "lost" (the race, to another version) or "error"
    status: Status  # the verdict's
    reason: str
    previous: str | None  # the version the alias held before
    holder: str | None  # the version it holds after, as read back
    beside: Mapping[str, str] = field(default_factory=dict)  # suffix → the companion's version
    checks: tuple[Check, ...] = ()  # the alias's, added to the decision's when it did not end on ours

    @property
    def won(self) -> bool:
        return self.outcome == "promoted"


def _take_alias(registry: Registry, inputs: _Inputs, version: str, previous: str | None,
                attestation_uri: str) -> _Result:
    """The decision passed: register the companions, move the alias and settle it (see "Contention" above),
    then, when it holds ours, move the companions' aliases."""
    name, alias = inputs.model_name, inputs.alias
    beside: dict[str, str] = {}  # suffix → the companion's version
    for companion in inputs.companions:
        beside[companion.suffix] = _register_beside(registry, companion, model_name=name, version=version,
                                                    sha=inputs.sha, alias=alias, attestation_uri=attestation_uri)
    registry.claim(name, alias, version)
    holder, problem = _contend(registry, name, alias, version)
    if holder != version:
        outcome = "lost" if holder is not None and not problem else "error"
        reason = (f"lost the race to v{holder}: alias {alias!r} of {name} holds v{holder}, not "
                  f"v{version}" if outcome == "lost" else f"alias {alias!r} not moved to v{version}: "
                  f"{problem or 'it reads back as none'}")
        return _Result(outcome=outcome, status="error", reason=reason, previous=previous, holder=holder,
                       beside=beside, checks=(Check("registry.alias", passed=False, detail=reason),))
    for suffix, companion_version in beside.items():
        # after the FP32 alias: an INT8 or STEP champion never precedes its FP32 one
        _move_alias(registry, f"{name}{suffix}", alias, companion_version)
    return _Result(outcome="promoted", status="pass", reason="all required evidence passed", previous=previous,
                   holder=holder, beside=beside)


def _log_promotion(registry: Registry, inputs: _Inputs, version: str, result: _Result) -> bool:
    """Append the promotion-log record; whether it was written. A refusal's record must be written (a failure is
    an error); once the alias moved, or was tried, a failure is a warning and `False`: it must not turn the
    promotion into an error exit."""
    record = {"at": datetime.now(UTC).isoformat(timespec="milliseconds"), "model": inputs.model_name,
              "version": version, "alias": inputs.alias, "sha256": inputs.sha, "promoted": result.won,
              "outcome": result.outcome, "reason": result.reason, "previous": result.previous,
              "alias_version": result.holder,
              "verdicts": {step: e.verdict.status for step, e in inputs.evidence.items()},
              "policy": inputs.policy.describe()}
    try:
        registry.append_promotion_log(inputs.model_name, record)
    except BackendError as err:
        if result.outcome == "refused":
            raise
        log.warning("promotion-log record of %s v%s not written: %s", inputs.model_name, version, err)
        return False
    return True


def _verdict(inputs: _Inputs, version: str, decision: Verdict, result: _Result, *, outcome_written: bool,
             log_written: bool) -> Verdict:
    """Promote's verdict: the decision's checks (and the alias's), the outcome in its message and details."""
    won = result.won
    details = PromoteDetails(model_name=inputs.model_name, version=version, alias=inputs.alias, promoted=won,
                             previous_alias_version=result.previous, reason=result.reason,
                             outcome_tags_written=outcome_written,
                             int8_version=result.beside.get(INT8_SUFFIX) if won else None,
                             step_version=result.beside.get(STEP_SUFFIX) if won else None,
                             policy=inputs.policy.describe(), outcome=result.outcome, alias_version=result.holder,
                             log_written=log_written)
    label = {"promoted": "promoted", "refused": "refused", "lost": "lost the race"}.get(result.outcome, "error")
    return Verdict(step=STEP, status=result.status, checks=(*decision.checks, *result.checks),
                   subject=decision.subject,
                   message=f"{label}: {result.reason}" if result.outcome != "lost" else result.reason,
                   versions=decision.versions, details=plain_details(details))


def compared_champion_check(compare: Verdict, *, registry: str, model_name: str, alias: str,
                            holder: str | None) -> Check:
    """compare's verdict counts only for the champion this promotion replaces: judged in this registry, for this
    model, against the version `alias` holds now (against none only while the alias is unset). A comparison made
    in a mistyped store's empty registry passes as a "first promotion" there, and one made before another
    promotion moved the alias judged a champion that is gone."""
    details = compare.details
    judged = details.get("champion_version")
    problems = []
    if details.get("registry") != registry:
        problems.append(f"compare judged in the registry {details.get('registry') or '(unnamed)'}, not {registry}")
    if details.get("model_name") != model_name:
        problems.append(f"compare judged model {details.get('model_name')!r}, not {model_name!r}")
    if judged != holder:
        problems.append(f"compare judged against {f'version {judged}' if judged else 'no champion'}, but "
                        f"{model_name}@{alias} holds {f'version {holder}' if holder else 'no version'}")
    return Check("compare.champion", passed=not problems, detail="; ".join(problems) or
                 f"compare judged against {f'version {holder}' if holder else 'no champion'} of {model_name}@{alias} "
                 f"in {registry}, which the alias holds now")


def int8_check(evidence: Mapping[str, Evidence], int8_sha: str) -> Check:
    """The INT8 file to register is the one calibrate wrote and parity judged (both verdicts are signed)."""
    calibrate, parity = evidence.get("calibrate"), evidence.get("parity")
    written = calibrate.verdict.registry_tags.get(conv.CALIBRATE_INT8_SHA_TAG) \
        if calibrate else None
    judged = parity.verdict.subject.data.get("int8") if parity and parity.verdict.subject else None
    problems = [f"{step} {what} sha256 {found or '(none)'}" for step, what, found in
                (("calibrate", "wrote", written), ("parity", "judged", judged)) if found != int8_sha]
    return Check("int8.same_artifact", passed=not problems,
                 detail="; ".join(problems) + f", the INT8 file is {int8_sha}" if problems else
                 f"calibrate wrote and parity judged {int8_sha}")


def stream_check(evidence: Mapping[str, Evidence], step_sha: str) -> Check:
    """The STEP file to register is the one parity drove step by step against the promoted model (the probe's
    verdict being about it is `decide`'s check)."""
    parity = evidence.get("parity")
    judged = parity.verdict.subject.data.get("stream_onnx") if parity and parity.verdict.subject else None
    return Check("stream.same_artifact", passed=judged == step_sha,
                 detail=f"parity judged stream model sha256 {judged or '(none)'}, the STEP file is {step_sha}"
                 if judged != step_sha else f"parity judged {step_sha} step by step against the promoted model")


@dataclass(frozen=True)
class Companion:
    """A file registered beside the promoted one under `<model_name><suffix>`: the INT8 model, the STEP model."""

    suffix: str
    path: Path
    sha256: str
    folder: str  # its own folder of the run: a version's source is a folder, and the FP32 version's is `model`


def _register_beside(registry: Registry, companion: Companion, *, model_name: str, version: str, sha: str,
                     alias: str, attestation_uri: str) -> str:
    name = f"{model_name}{companion.suffix}"
    found = registry.find_version(name, companion.sha256) or registry.register(
        name, companion.path, companion.sha256, artifact_path=companion.folder)
    registry.set_tags(name, found, {
        conv.ONNX_DIGEST_TAG: companion.sha256, conv.FP32_MODEL_TAG: model_name, conv.FP32_VERSION_TAG: version,
        conv.FP32_SHA_TAG: sha, conv.attestation_uri_tag(alias): attestation_uri})
    return found


def evidence_tags(evidence: Mapping[str, Evidence], sha: str, judged: Collection[str]) -> dict[str, str]:
    """The version's evidence tags, a handful (`conv.MAX_VERSION_TAGS` with the outcome): the ONNX digest, and
    of what the steps ask to tag on it only what a later step reads back from the version
    (`conv.READ_BACK_TAGS`: the drift and estimate profiles). Each step's status, key figure and verdict digest go
    into the description's table (`description`), its verdict and envelope into the attestations. A step writes
    only under its own `skewgate.<step>.` prefix, so nothing a verdict says can overwrite what promote derives.
    Only the steps of `judged` tag: those whose evidence check passed (required, accepted, about this file and
    signed). A verdict no check judged (a step the policy does not require, an unsigned or foreign one) says
    nothing about the version: its profile would otherwise become what the nightly trusts."""

    tags: dict[str, str] = {}
    for step, item in evidence.items():
        if step not in judged:
            continue
        prefix = f"skewgate.{step}."
        tags.update({k: v[:5000] for k, v in item.verdict.registry_tags.items()
                     if k.startswith(prefix) and k in conv.READ_BACK_TAGS})
    tags[conv.ONNX_DIGEST_TAG] = sha
    return tags


def _attest(registry: Registry, name: str, version: str, evidence: Mapping[str, Evidence], decision: Verdict,
            policy: Policy, key: attest.SigningKey | None, alias: str, served: str | None = None
            ) -> dict[str, str]:
    """Store every step's verdict and envelope, and promote's own signed decision, with the version. `served`: the
    STEP model's digest, which the decision names as the file the `SERVED_BY` steps judged (`skewgate verify`
    reads it)."""
    files = {}
    for step, item in evidence.items():
        files[f"{step}.json"] = item.content
        if item.envelope is not None:
            files[f"{step}{attest.ENVELOPE_SUFFIX}"] = attest.envelope_bytes(item.envelope)
    if key is not None:
        assert decision.subject is not None
        predicate = {"decision": decision.status, "model_name": name, "version": version, "alias": alias,
                     "policy": policy.describe(), "checks": [c.name for c in decision.checks if c.passed],
                     "evidence": {s: {"verdict_sha256": e.sha256, "status": e.verdict.status}
                                  for s, e in evidence.items()}}
        subject = [{"name": Path(decision.subject.artifact).name, "digest": {"sha256": decision.subject.sha256}}]
        if served:
            predicate["served"] = {step: served for step in SERVED_BY}
            subject.append({"name": "step.onnx", "digest": {"sha256": served}})
        envelope = attest.sign(attest.statement(subject, attest.PROMOTION_PREDICATE, predicate), key)
        files[f"promotion{attest.ENVELOPE_SUFFIX}"] = attest.envelope_bytes(envelope)
    uri = registry.store_attestations(name, version, files)
    # promote's own signature is in it (`skewgate verify` checks it), under this alias's tag only
    return {conv.attestation_uri_tag(alias): uri}


def _move_alias(registry: Registry, name: str, alias: str, version: str) -> None:
    try:
        registry.set_alias(name, alias, version)
    except BackendError:
        # The write may have landed before the connection broke: the alias, read back, says which it was.
        if registry.get_alias(name, alias) != version:
            raise
    now = registry.get_alias(name, alias)
    if now != version:
        raise Inconsistent(f"alias {alias!r} of {name} reads back as version {now}, not {version} (moved by a "
                           "concurrent promotion?)")


def _contend(registry: Registry, name: str, alias: str, version: str) -> tuple[str | None, str]:
    """Move the alias to `version`, then settle: (the version the alias holds, a problem moving it or "").
    Returns once the alias holds another version (we lost) or holds ours with no promotion of another version
    to it under way (we won; after `CONTENTION_WAIT_S` of waiting, with a warning)."""
    problem = ""
    try:
        registry.set_alias(name, alias, version)
    except BackendError as err:
        problem = str(err)  # it may have landed before the connection broke: the read-back says
    time.sleep(SETTLE_S)
    deadline = time.monotonic() + CONTENTION_WAIT_S
    while True:
        try:
            holder = registry.get_alias(name, alias)
        except BackendError as err:
            return None, problem or str(err)
        if holder != version:
            return holder, problem if holder is None else ""
        others = registry.contenders(name, alias, version)
        if not others:
            return holder, ""
        if time.monotonic() > deadline:
            log.warning("%s@%s holds v%s; promotions %s still under way after %.0f s", name, alias, version,
                        ", ".join(others), CONTENTION_WAIT_S)
            return holder, ""
        time.sleep(POLL_S)


def description(evidence: Mapping[str, Evidence], decision: Verdict, policy: Policy, *, outcome: str = "") -> str:
    """The version's description in the registry, for a person: a first line in plain words (the versions table
    shows it unrendered), then the evidence table — one row per step: status, key figure (`conv.key_figure`),
    the first 12 hex digits of the SHA-256 of its verdict file (the file is in the attestations) — and what a
    refusal refused. Verdict text is user-influenced, so it is escaped."""
    from skewgate.common.markdown import cell

    assert decision.subject is not None
    outcome = outcome or ("promoted" if decision.status == "pass" else "refused")
    required = list(policy.required)
    passed = [s for s in required if s in evidence and any(c.name == f"evidence.{s}" and c.passed
                                                            for c in decision.checks)]
    lines = [f"skewgate: {outcome}. {len(passed)} of {len(required)} required steps passed for sha256 "
             f"{decision.subject.sha256[:12]}.", "",
             "| step | status | key figure | verdict sha256 |", "|---|---|---|---|"]
    for step in [*required, *sorted(set(evidence) - set(required))]:
        item = evidence.get(step)
        if item is None:
            lines.append(f"| {cell(step)} | missing | no verdict for this required step | |")
            continue
        lines.append(f"| {cell(step)} | {item.verdict.status} | {cell(conv.key_figure(item.verdict))} | "
                     f"`{item.sha256[:12]}` |")
    failed = decision.failed_checks
    if failed:
        lines += ["", "Refused because:", ""]
        lines += [f"* {cell(c.name)}: {cell(c.detail[:500])}" for c in failed]
    trust = ("verdicts signed by a trusted key" if policy.trusted_keys else
             "verdicts not signed (--allow-unsigned)")
    lines += ["", f"Required: {cell(', '.join(required) or '(none)')}; {trust}; not required: "
              f"{cell(', '.join(sorted(set(evidence) - set(required))) or '(none)')}."]
    return "\n".join(lines)


def _write_outcome(registry: Registry, name: str, version: str, alias: str, promoted: bool, reason: str,
                   text: str) -> bool:
    """The human-facing outcome (the alias's tags and the description), last: the alias (or its refusal) is
    already final, so a failure here is reported in the details instead of turning a completed promotion into an
    error."""
    status_tag, reason_tag = conv.promotion_tags(alias)
    try:
        registry.set_description(name, version, text)
        registry.set_tags(name, version, {status_tag: "promoted" if promoted else "refused",
                                          reason_tag: reason[:5000]})
    except BackendError as err:
        log.warning("outcome tags of %s v%s not written: %s", name, version, err)
        return False
    return True


def input_example(npz: str | Path, onnx: str | Path, *, rows: int) -> dict[str, Any]:
    """The first `rows` samples of each model input in `npz`: the registered model's input example."""
    from skewgate.common.io import load_npz, onnx_input_specs

    specs = onnx_input_specs(load_onnx(onnx))
    arrays = load_npz(npz, expected=specs)
    return {spec.name: arrays[spec.name][:rows] for spec in specs}


def _reason(decision: Verdict) -> str:
    if not decision.checks:
        return "no required steps: nothing to base a promotion on"
    return "; ".join(f"{c.name}: {c.detail}" for c in decision.failed_checks)
