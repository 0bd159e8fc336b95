"""Signed evidence: every verdict is also an in-toto Statement v1 inside a DSSE envelope, signed with Ed25519.

The statement's subject is the judged artifact (its name and SHA-256) followed by the step's input data sets
(`data/<name>`); its predicate is the verdict itself, so an envelope proves who said what about which file. The
envelope (`<verdict stem>.intoto.jsonl`, one JSON line, the in-toto bundle convention) lives beside the verdict
so that copying the folder keeps it. Keys: `skewgate keys generate --out DIR` writes `skewgate.key` (PKCS#8 PEM,
mode 0600) and `skewgate.pub`; key ids are the SHA-256 of the raw public key (as sigstore's model-signing does).

Replay protection rests on the signature: a verdict recorded inside a pipeline run is signed together with that
run's id, the id of the step's own MLflow run and the time it was recorded (`RunContext`, as annotations of the
first subject; the predicate stays the verdict itself). Promote, inside a pipeline run, refuses a verdict signed
for another run and counts a step's latest signed verdict. A verdict from an ad-hoc CLI call without a pipeline
run id carries no such annotations (its statement is exactly the pre-binding one) and is judged by its signature
alone.

Ed25519 signatures are deterministic: signing the same verdict in the same run context twice gives the same
envelope, so the CLI, the KFP component and the MLflow log can each sign without passing an envelope around.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.documents import parse_json
from skewgate.common.errors import InputError
from skewgate.common.io import read_regular_file
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
VERDICT_PREDICATE = "https://skewgate.dev/attestation/verdict/v1"
PROMOTION_PREDICATE = "https://skewgate.dev/attestation/promotion/v1"
ENVELOPE_SUFFIX = ".intoto.jsonl"
KEY_FILE, PUBLIC_KEY_FILE = "skewgate.key", "skewgate.pub"
SIGNING_KEY_ENV, TRUSTED_KEYS_ENV = "SKEWGATE_SIGNING_KEY", "SKEWGATE_TRUSTED_KEYS"
MAX_ENVELOPE_BYTES = 32 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024  # a PEM Ed25519 key is about 120 bytes
# Annotations of a verdict statement's first subject that bind it to where it was recorded (`RunContext`).
PIPELINE_RUN_ANNOTATION = "skewgate.pipeline_run_id"
STEP_RUN_ANNOTATION = "skewgate.step_run_id"
RECORDED_AT_ANNOTATION = "skewgate.recorded_at_ms"


class SignatureInvalid(Exception):
    """The envelope is not a valid signature by a trusted key over the expected statement (a refusal, not an
    evaluation error: promote turns it into a failed check)."""


@dataclass(frozen=True)
class SigningKey:
    key: Ed25519PrivateKey
    keyid: str


@dataclass(frozen=True)
class RunContext:
    """Where and when a verdict was recorded, as signed with it: the pipeline run (empty: an ad-hoc call), the
    step's own MLflow run (empty: not tracked) and the recording time in milliseconds since the epoch (orders the
    retries of one step inside one pipeline run)."""

    pipeline_run_id: str = ""
    step_run_id: str = ""
    recorded_at_ms: int = 0

    def annotations(self) -> dict[str, Any]:
        if not (self.pipeline_run_id or self.step_run_id):
            return {}  # an ad-hoc, untracked verdict: the statement as it was before run binding
        return {PIPELINE_RUN_ANNOTATION: self.pipeline_run_id, STEP_RUN_ANNOTATION: self.step_run_id,
                RECORDED_AT_ANNOTATION: self.recorded_at_ms}

    def describe(self) -> str:
        where = f"pipeline run {self.pipeline_run_id}" if self.pipeline_run_id else "no pipeline run (ad hoc)"
        return f"{where}, step run {self.step_run_id or '(none)'}"


def generate_keys(out: str | Path) -> tuple[Path, Path]:
    """Write a new Ed25519 key pair; the private key is created with mode 0600 (never world-readable)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    key_path, pub_path = out / KEY_FILE, out / PUBLIC_KEY_FILE
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    pub_path.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_path, pub_path


def keyid(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def load_signing_key(path: str | Path) -> SigningKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    try:
        pem = read_regular_file(path, limit=MAX_KEY_BYTES, expected="an Ed25519 private key (PEM)")
        _check_private(path)
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise InputError(path, expected="an unencrypted Ed25519 private key (PEM)", found=str(err)) from err
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(path, expected="an Ed25519 private key", found=type(key).__name__)
    return SigningKey(key, keyid(key.public_key()))


def _check_private(path: Path) -> None:
    """Refuse a signing key that group or others may read, as ssh refuses such an identity file: whoever reads it
    can sign verdicts. A Kubernetes Secret volume is the exception: kubelet writes its files 0644 (KFP cannot set
    the volume's mode) behind the `..data` link of its atomic layout, and the pod is the boundary there."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077 and not _in_secret_volume(path):
        raise InputError(path, expected=f"a private key only its owner can read (chmod 600 {path})",
                         found=f"mode {mode:04o}: readable or writable by group or others")


def _in_secret_volume(path: Path) -> bool:
    data = path.parent / "..data"
    return path.is_symlink() and data.is_symlink() and \
        path.resolve().parent == data.resolve()


def signing_key_from_env(explicit: str | Path | None = None) -> SigningKey | None:
    """The key given explicitly, else `$SKEWGATE_SIGNING_KEY`, else None (the step writes no envelope)."""
    path = explicit or os.environ.get(SIGNING_KEY_ENV, "")
    return load_signing_key(path) if path else None


def load_trusted_keys(paths: Iterable[str | Path]) -> dict[str, Ed25519PublicKey]:
    """Public keys by key id. Paths may also come from `$SKEWGATE_TRUSTED_KEYS` (separated by the OS path
    separator, as PATH is)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    keys: dict[str, Ed25519PublicKey] = {}
    for path in map(Path, paths):
        try:
            pem = read_regular_file(path, limit=MAX_KEY_BYTES, expected="an Ed25519 public key (PEM)")
            public = serialization.load_pem_public_key(pem)
        except ValueError as err:
            raise InputError(path, expected="an Ed25519 public key (PEM)", found=str(err)) from err
        if not isinstance(public, Ed25519PublicKey):
            raise InputError(path, expected="an Ed25519 public key", found=type(public).__name__)
        keys[keyid(public)] = public
    return keys


def trusted_key_paths(given: Iterable[str | Path] = ()) -> list[str]:
    paths = [str(p) for p in given]
    paths += [p for p in os.environ.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p]
    return paths


def verdict_statement(verdict: Verdict, context: RunContext | None = None) -> dict[str, Any]:
    """The in-toto Statement v1 for a verdict: subject = judged artifact (annotated with the run `context` when
    there is one), then its data sets."""
    if verdict.subject is None:
        raise InputError(f"{verdict.step} verdict", field="subject", expected="the judged artifact",
                         found="none (a verdict about nothing cannot be attested)")
    artifact: dict[str, Any] = {"name": Path(verdict.subject.artifact).name or verdict.subject.artifact,
                                "digest": {"sha256": verdict.subject.sha256}}
    annotations = (context or RunContext()).annotations()
    if annotations:
        artifact["annotations"] = annotations
    subject = [artifact]
    subject += [{"name": f"data/{name}", "digest": {"sha256": digest}}
                for name, digest in sorted(verdict.subject.data.items())]
    return statement(subject, VERDICT_PREDICATE, verdict.to_dict())


def statement(subject: list[dict[str, Any]], predicate_type: str, predicate: Mapping[str, Any]) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": subject, "predicateType": predicate_type,
            "predicate": dict(predicate)}


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is actually signed (type and body, length-prefixed)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def sign(statement_: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """A DSSE envelope over the canonical JSON of `statement_`."""
    body = json.dumps(statement_, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    signature = key.key.sign(pae(PAYLOAD_TYPE, body))
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(body).decode(),
            "signatures": [{"keyid": key.keyid, "sig": base64.b64encode(signature).decode()}]}


def open_envelope(envelope: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey]) -> tuple[dict[str, Any], str]:
    """The statement inside and the key id that signed it, if a trusted key did; else `SignatureInvalid`."""
    from cryptography.exceptions import InvalidSignature

    if not trusted:
        raise SignatureInvalid("no trusted public keys were given")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureInvalid(f"payloadType {envelope.get('payloadType')!r}, expected {PAYLOAD_TYPE}")
    try:
        body = base64.b64decode(str(envelope["payload"]), validate=True)
        signatures = list(envelope["signatures"])
    except (KeyError, TypeError, ValueError) as err:
        raise SignatureInvalid(f"malformed envelope ({type(err).__name__}: {err})") from err
    for entry in signatures:
        public = trusted.get(str(entry.get("keyid", ""))) if isinstance(entry, dict) else None
        if public is None:
            continue
        try:
            public.verify(base64.b64decode(str(entry.get("sig", "")), validate=True), pae(PAYLOAD_TYPE, body))
        except (InvalidSignature, ValueError):
            continue
        try:
            opened = parse_json(body, source="the envelope's payload", expected="an in-toto statement")
        except InputError as err:
            raise SignatureInvalid(str(err)) from err
        if not isinstance(opened, dict):
            raise SignatureInvalid(f"the envelope's payload is a JSON {type(opened).__name__}, not a statement")
        if opened.get("_type") != STATEMENT_TYPE:
            raise SignatureInvalid(f"statement _type {opened.get('_type')!r}, expected {STATEMENT_TYPE}")
        return opened, str(entry["keyid"])
    ids = sorted(str(e.get("keyid")) for e in signatures if isinstance(e, dict))
    raise SignatureInvalid(f"no valid signature by a trusted key (signed by {ids or 'nobody'}; "
                           f"trusted: {sorted(trusted)})")


def envelope_path(verdict_path: str | Path) -> Path:
    """`export.json` → `export.intoto.jsonl`, beside it."""
    path = Path(verdict_path)
    return path.with_name(path.stem + ENVELOPE_SUFFIX)


def envelope_bytes(envelope: Mapping[str, Any]) -> bytes:
    """An envelope as stored everywhere (beside the verdict, in the step's MLflow run, with the registered
    version): one JSON line, keys sorted. The signature covers the payload, not these bytes, but every copy of one
    envelope is byte-identical so that copies can be compared by digest."""
    return (json.dumps(envelope, sort_keys=True) + "\n").encode("utf-8")


def write_envelope(envelope: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.write_bytes(envelope_bytes(envelope))
    return path


def read_envelope(path: str | Path) -> dict[str, Any]:
    """The DSSE envelope in `path`. No file is `SignatureInvalid` ("unsigned", a refusal); a file that is not a
    regular file of at most `MAX_ENVELOPE_BYTES` is an `InputError` (bad input: nothing is decided on it)."""
    path = Path(path)
    try:
        raw = read_regular_file(path, limit=MAX_ENVELOPE_BYTES, expected="a DSSE envelope (one JSON line)")
    except InputError as err:
        if isinstance(err.__cause__, FileNotFoundError):
            raise SignatureInvalid(f"unsigned: no {path.name} beside the verdict") from err
        raise
    try:
        data = parse_json(raw, source=path.name, expected="a DSSE envelope (one JSON line)")
    except InputError as err:
        raise SignatureInvalid(f"{path.name} is not a DSSE envelope ({err.found})") from err
    if not isinstance(data, dict):
        raise SignatureInvalid(f"{path.name} is not a DSSE envelope (a JSON {type(data).__name__})")
    return data


@dataclass(frozen=True)
class SignedVerdict:
    """A verdict statement a trusted key signed: the statement, the signer's key id and its run context."""

    statement: dict[str, Any]
    signer: str
    context: RunContext

    @property
    def predicate(self) -> Any:
        return self.statement.get("predicate")

    @property
    def step(self) -> str:
        return str(self.predicate.get("step", "")) if isinstance(self.predicate, dict) else ""

    @property
    def status(self) -> str:
        return str(self.predicate.get("status", "")) if isinstance(self.predicate, dict) else ""


def open_verdict(envelope: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey]) -> SignedVerdict:
    """The verdict statement inside `envelope` if a trusted key signed it, with its run context; else
    `SignatureInvalid`."""
    opened, signer = open_envelope(envelope, trusted)
    if opened.get("predicateType") != VERDICT_PREDICATE:
        raise SignatureInvalid(f"predicateType {opened.get('predicateType')!r}, expected {VERDICT_PREDICATE}")
    return SignedVerdict(opened, signer, run_context(opened))


def run_context(statement_: Mapping[str, Any]) -> RunContext:
    """The run context signed in a verdict statement (empty for an ad-hoc verdict or one signed before run
    binding). Malformed annotations are `SignatureInvalid`: nothing is read into them."""
    subject = statement_.get("subject")
    first = subject[0] if isinstance(subject, list) and subject else None
    annotations = first.get("annotations") if isinstance(first, dict) else None
    if annotations is None:
        return RunContext()
    pipeline = annotations.get(PIPELINE_RUN_ANNOTATION, "") if isinstance(annotations, dict) else None
    step_run = annotations.get(STEP_RUN_ANNOTATION, "") if isinstance(annotations, dict) else None
    recorded = annotations.get(RECORDED_AT_ANNOTATION, 0) if isinstance(annotations, dict) else None
    if not (isinstance(pipeline, str) and isinstance(step_run, str) and type(recorded) is int):
        raise SignatureInvalid(f"malformed run annotations in the signed statement: {annotations!r}"[:300])
    return RunContext(pipeline, step_run, recorded)


def verify_verdict(verdict: Verdict, envelope: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey], *,
                   artifact_sha256: str, pipeline_run_id: str = "") -> str:
    """Check that a trusted key signed exactly this verdict about exactly this artifact (and, given a
    `pipeline_run_id`, inside exactly that pipeline run); returns the signer's key id, raises `SignatureInvalid`
    otherwise."""
    return verified_verdict(verdict, envelope, trusted, artifact_sha256=artifact_sha256,
                            pipeline_run_id=pipeline_run_id).signer


def verified_verdict(verdict: Verdict, envelope: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey], *,
                     artifact_sha256: str, pipeline_run_id: str = "") -> SignedVerdict:
    """`verify_verdict`, returning what was signed."""
    signed = open_verdict(envelope, trusted)
    if signed.predicate != json.loads(verdict.to_json()):
        raise SignatureInvalid("the signed verdict differs from the verdict file (edited after signing, or the "
                               "envelope of another verdict)")
    subject = signed.statement.get("subject") or [{}]
    signed_digest = (subject[0].get("digest") or {}).get("sha256") if isinstance(subject[0], dict) else None
    if signed_digest != artifact_sha256:
        raise SignatureInvalid(f"signed for artifact sha256 {signed_digest}, not {artifact_sha256}")
    if pipeline_run_id and signed.context.pipeline_run_id != pipeline_run_id:
        found = (f"pipeline run {signed.context.pipeline_run_id}" if signed.context.pipeline_run_id
                 else "no pipeline run (an ad-hoc verdict)")
        raise SignatureInvalid(f"signed for {found}, not this pipeline run {pipeline_run_id} (replayed?)")
    return signed


_PEM = re.compile(r"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def write_trusted_keys(pems: str, folder: Path) -> tuple[str, ...]:
    """Every PEM public key in `pems` (one or several, concatenated) as a file of its own in `folder`."""
    paths = []
    for index, pem in enumerate(_PEM.findall(pems)):
        path = folder / f"trusted-{index}.pub"
        path.write_text(pem + "\n", encoding="utf-8")
        paths.append(str(path))
    return tuple(paths)
