"""The stored form of a DSSE envelope: the same bytes from every writer, and the same bytes as before."""

from skewgate.common import attest

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
