"""The stored form of a DSSE envelope (the same bytes from every writer, and as before) and the run context signed
with a verdict."""

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skewgate.common import attest
from skewgate.common.errors import InputError
from skewgate.common.verdict import Check, Subject, Verdict

ENVELOPE = {"payloadType": attest.PAYLOAD_TYPE, "payload": "eyJfdHlwZSI6ICJ4In0=",
            "signatures": [{"sig": "c2ln", "keyid": "ab" * 32}]}
# The form every envelope in a registry so far was stored in: one JSON line, keys sorted, ", " and ": " separators.
STORED = (b'{"payload": "eyJfdHlwZSI6ICJ4In0=", "payloadType": "application/vnd.in-toto+json", '
          b'"signatures": [{"keyid": "' + b"ab" * 32 + b'", "sig": "c2ln"}]}\n')


def test_envelope_bytes_are_the_stored_form():
    assert attest.envelope_bytes(ENVELOPE) == STORED


def test_the_envelope_file_beside_a_verdict_holds_the_same_bytes(tmp_path):
    path = attest.write_envelope(ENVELOPE, attest.envelope_path(tmp_path / "export.json"))
    assert path.name == "export.intoto.jsonl"
    assert path.read_bytes() == STORED
    assert attest.read_envelope(path) == ENVELOPE


def _key() -> attest.SigningKey:
    key = Ed25519PrivateKey.generate()
    return attest.SigningKey(key, attest.keyid(key.public_key()))


def _verdict():
    return Verdict.from_checks("export", [Check("c", passed=True)], subject=Subject("m.onnx", "ab" * 32))


def test_the_run_context_is_signed_with_the_verdict_and_checked_against_the_pipeline_run():
    key, verdict = _key(), _verdict()
    trusted = {key.keyid: key.key.public_key()}
    context = attest.RunContext("run-a", "step-run-1", 1_000)
    envelope = attest.sign(attest.verdict_statement(verdict, context), key)
    signed = attest.verified_verdict(verdict, envelope, trusted, artifact_sha256="ab" * 32, pipeline_run_id="run-a")
    assert signed.context == context and signed.step == "export" and signed.status == "pass"
    with pytest.raises(attest.SignatureInvalid, match="signed for pipeline run run-a, not this pipeline run run-b"):
        attest.verify_verdict(verdict, envelope, trusted, artifact_sha256="ab" * 32, pipeline_run_id="run-b")


def test_an_ad_hoc_statement_is_the_one_signed_before_run_binding_and_verifies_by_signature_alone():
    key, verdict = _key(), _verdict()
    trusted = {key.keyid: key.key.public_key()}
    statement = attest.verdict_statement(verdict, attest.RunContext(recorded_at_ms=5))
    assert statement == attest.verdict_statement(verdict)
    assert statement["subject"][0] == {"name": "m.onnx", "digest": {"sha256": "ab" * 32}}
    envelope = attest.sign(statement, key)
    assert attest.verify_verdict(verdict, envelope, trusted, artifact_sha256="ab" * 32) == key.keyid
    with pytest.raises(attest.SignatureInvalid, match="signed for no pipeline run"):
        attest.verify_verdict(verdict, envelope, trusted, artifact_sha256="ab" * 32, pipeline_run_id="run-b")


def test_malformed_run_annotations_are_refused():
    statement = attest.verdict_statement(_verdict(), attest.RunContext("run-a", "s", 1))
    statement["subject"][0]["annotations"][attest.RECORDED_AT_ANNOTATION] = "late"
    with pytest.raises(attest.SignatureInvalid, match="malformed run annotations"):
        attest.run_context(statement)


@pytest.mark.parametrize("content", [
    pytest.param('{"payload": ' + "[" * 20_000 + "]" * 20_000 + "}", id="20000-deep"),
    pytest.param('{"payloadType": 1' + "0" * 5000 + "}", id="5000-digit-int"),
    pytest.param('{"payload": "a", "payload": "b"}', id="duplicate-key"),
])
def test_a_hostile_envelope_is_a_refusal_not_a_traceback(tmp_path, content):
    path = tmp_path / "export.intoto.jsonl"
    path.write_text(content)
    with pytest.raises(attest.SignatureInvalid, match=r"export\.intoto\.jsonl is not a DSSE envelope"):
        attest.read_envelope(path)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620], ids=["group-readable", "world-readable", "group-writable"])
def test_a_signing_key_others_can_read_is_refused_as_ssh_refuses_it(tmp_path, keys, mode):
    key = tmp_path / "skewgate.key"
    key.write_bytes(keys[0].read_bytes())
    key.chmod(0o600)
    assert attest.load_signing_key(key).keyid
    key.chmod(mode)
    with pytest.raises(InputError, match=rf"skewgate\.key: expected a private key only its owner can read "
                                         rf"\(chmod 600 .*\), found mode 0{mode:o}"):
        attest.load_signing_key(key)


def test_a_kubernetes_secret_volume_key_is_read_at_the_mode_kubelet_gives_it(tmp_path, keys):
    """kubelet's atomic layout: the file lives in a timestamped folder, `..data` links to it, and the key's name
    links through `..data`; its mode is the volume's default 0644, which a KFP task cannot change."""
    volume = tmp_path / "skewgate-signing"
    (volume / "..2026_12_04_10_00_00.1").mkdir(parents=True)
    (volume / "..2026_12_04_10_00_00.1" / "skewgate.key").write_bytes(keys[0].read_bytes())
    (volume / "..2026_12_04_10_00_00.1" / "skewgate.key").chmod(0o644)
    (volume / "..data").symlink_to("..2026_12_04_10_00_00.1")
    (volume / "skewgate.key").symlink_to("..data/skewgate.key")
    assert attest.load_signing_key(volume / "skewgate.key").keyid
    plain = tmp_path / "skewgate.key"
    plain.symlink_to(volume / "..2026_12_04_10_00_00.1" / "skewgate.key")  # a link, but not that layout
    with pytest.raises(InputError, match="found mode 0644"):
        attest.load_signing_key(plain)
