"""promote_op as KFP sees it: it lays the pipeline's artifacts out as promote reads them (tests/test_step_contract.py
holds its defaults to `PromoteOptions`'s)."""

import os

import pytest

from skewgate.common import attest
from skewgate.common.attest import write_trusted_keys
from skewgate.common.errors import InputError
from skewgate.promote.run import gather_verdicts
from tests.common.test_io import deadline


def test_every_concatenated_public_key_becomes_a_trusted_key(tmp_path):
    publics = [attest.generate_keys(tmp_path / name)[1] for name in ("a", "b")]
    text = "\n".join(p.read_text() for p in publics) + "\nnot a key\n"
    written = write_trusted_keys(text, tmp_path)
    assert sorted(attest.load_trusted_keys(written)) == sorted(attest.load_trusted_keys(publics))
    assert write_trusted_keys("", tmp_path) == ()


def test_verdicts_are_laid_out_by_step_beside_their_envelopes(tmp_path):
    verdict, envelope = tmp_path / "v", tmp_path / "e"
    verdict.write_text("{}")
    envelope.write_text("[]")
    folder = gather_verdicts({"export": (verdict, envelope)}, tmp_path / "verdicts")
    assert sorted(p.name for p in folder.iterdir()) == ["export.intoto.jsonl", "export.json"]
    assert attest.envelope_path(folder / "export.json") == folder / "export.intoto.jsonl"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_among_the_artifacts_or_keys_is_bad_input_not_an_endless_read(tmp_path):
    verdict, envelope = tmp_path / "v", tmp_path / "e"
    verdict.write_text("{}")
    os.mkfifo(envelope)
    with deadline(), pytest.raises(InputError, match=r"/e: expected a DSSE envelope \(a regular file\), found a FIFO"):
        gather_verdicts({"export": (verdict, envelope)}, tmp_path / "verdicts")
    (key := tmp_path / "key.pub").symlink_to(envelope)
    with deadline(), pytest.raises(InputError, match=r"key\.pub: expected an Ed25519 public key \(PEM\) \(a regular "
                                                     r"file\), found a symbolic link to a FIFO"):
        attest.load_trusted_keys([key])
    with deadline(), pytest.raises(InputError, match="found a symbolic link to a FIFO"):
        attest.load_signing_key(key)
