"""Signed evidence: every verdict is also an in-toto Statement v1 inside a DSSE envelope, signed with Ed25519.

The statement's subject is the judged artifact (its name and SHA-256) followed by the step's input data sets
(`data/<name>`); its predicate is the verdict itself, so an envelope proves who said what about which file. The
envelope (`<verdict stem>.intoto.jsonl`, one JSON line, the in-toto bundle convention) lives beside the verdict
so that copying the folder keeps it. Keys: `skewgate keys generate --out DIR` writes `skewgate.key` (PKCS#8 PEM,
mode 0600) and `skewgate.pub`; key ids are the SHA-256 of the raw public key (as sigstore's model-signing does).

Ed25519 signatures are deterministic: signing the same verdict twice gives the same envelope, so the CLI, the
KFP component and the MLflow log can each sign without passing an envelope around.
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


class SignatureInvalid(Exception):
    """The envelope is not a valid signature by a trusted key over the expected statement (a refusal, not an
    evaluation error: promote turns it into a failed check)."""


@dataclass(frozen=True)
class SigningKey:
    key: Ed25519PrivateKey
    keyid: str


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
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as err:
        raise InputError(path, expected="an unencrypted Ed25519 private key (PEM)", found=str(err)) from err
    if not isinstance(key, Ed25519PrivateKey):
        raise InputError(path, expected="an Ed25519 private key", found=type(key).__name__)
    return SigningKey(key, keyid(key.public_key()))


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


def verdict_statement(verdict: Verdict) -> dict[str, Any]:
    """The in-toto Statement v1 for a verdict: subject = judged artifact, then its data sets."""
    if verdict.subject is None:
        raise InputError(f"{verdict.step} verdict", field="subject", expected="the judged artifact",
                         found="none (a verdict about nothing cannot be attested)")
    subject = [{"name": Path(verdict.subject.artifact).name or verdict.subject.artifact,
                "digest": {"sha256": verdict.subject.sha256}}]
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
        opened: dict[str, Any] = json.loads(body)
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
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SignatureInvalid(f"{path.name} is not a DSSE envelope ({err})") from err
    except RecursionError as err:
        raise SignatureInvalid(f"{path.name} is not a DSSE envelope (JSON nested too deeply)") from err
    if not isinstance(data, dict):
        raise SignatureInvalid(f"{path.name} is not a DSSE envelope (a JSON {type(data).__name__})")
    return data


def verify_verdict(verdict: Verdict, envelope: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey], *,
                   artifact_sha256: str) -> str:
    """Check that a trusted key signed exactly this verdict about exactly this artifact; returns the signer's
    key id, raises `SignatureInvalid` otherwise."""
    opened, signer = open_envelope(envelope, trusted)
    if opened.get("predicateType") != VERDICT_PREDICATE:
        raise SignatureInvalid(f"predicateType {opened.get('predicateType')!r}, expected {VERDICT_PREDICATE}")
    if opened.get("predicate") != json.loads(verdict.to_json()):
        raise SignatureInvalid("the signed verdict differs from the verdict file (edited after signing, or the "
                               "envelope of another verdict)")
    subject = opened.get("subject") or [{}]
    signed_digest = (subject[0].get("digest") or {}).get("sha256") if isinstance(subject[0], dict) else None
    if signed_digest != artifact_sha256:
        raise SignatureInvalid(f"signed for artifact sha256 {signed_digest}, not {artifact_sha256}")
    return signer


_PEM = re.compile(r"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.S)


def write_trusted_keys(pems: str, folder: Path) -> tuple[str, ...]:
    """Every PEM public key in `pems` (one or several, concatenated) as a file of its own in `folder`."""
    paths = []
    for index, pem in enumerate(_PEM.findall(pems)):
        path = folder / f"trusted-{index}.pub"
        path.write_text(pem + "\n", encoding="utf-8")
        paths.append(str(path))
    return tuple(paths)
