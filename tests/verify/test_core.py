"""verify_champion against stored evidence that is not what a download leaves: FIFOs and links to devices."""

import os
from pathlib import Path

import pytest

from skewgate.common.io import sha256_file
from skewgate.common.mlflow_log import Champion
from skewgate.verify.core import verify_champion
from tests.common.test_io import deadline
from tests.promote.fake_registry import FakeRegistry
from tests.promote.test_core import NAME, PASSING, TRUSTED, _verdict, _write, promote


@pytest.fixture
def champion(tmp_path, tiny_onnx):
    """A champion promoted on signed evidence, laid out as `RegistryChampions` downloads it."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    onnx_file = model_dir / "model.onnx"
    onnx_file.write_bytes(tiny_onnx.read_bytes())
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    assert promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry).status == "pass"
    attestations = tmp_path / "attestations"
    attestations.mkdir()
    for name, content in registry.attestations[(NAME, "1")].items():
        (attestations / name).write_bytes(content)
    return Champion(version="1", tags=registry.versions[NAME]["1"], model_dir=model_dir,
                    attestations_dir=attestations)


class _Source:
    def __init__(self, champion):
        self.champion = champion

    def fetch(self, name, alias, workdir):
        return self.champion


def _verify(champion, tmp_path):
    return verify_champion(model_name=NAME, alias="champion", source=_Source(champion), trusted=TRUSTED,
                           workdir=tmp_path)


def test_the_stored_evidence_verifies(champion, tmp_path):
    assert _verify(champion, tmp_path).status == "pass"


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs a POSIX /dev")
@pytest.mark.parametrize(("entry", "check"), [("export.json", "evidence.export"),
                                              ("export.intoto.jsonl", "evidence.export"),
                                              ("promotion.intoto.jsonl", "attestation.promotion")])
@pytest.mark.parametrize(("make", "found"), [(os.mkfifo, "found a FIFO"),
                                             (lambda p: p.symlink_to("/dev/zero"), "a character device")])
def test_a_stored_file_that_is_not_a_regular_file_fails_without_being_read(champion, tmp_path, entry, check, make,
                                                                             found):
    assert champion.attestations_dir is not None
    (champion.attestations_dir / entry).unlink()
    make(champion.attestations_dir / entry)
    with deadline():
        result = _verify(champion, tmp_path)
    assert result.status == "fail"
    (failed,) = [c for c in result.checks if c.name == check]
    assert not failed.passed and entry in failed.detail and found in failed.detail
