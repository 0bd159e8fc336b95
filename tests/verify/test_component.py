"""verify_op as KFP sees it: its body judges a registry (tests/test_step_contract.py holds its defaults to
`VerifyOptions`'s)."""

import json
from types import SimpleNamespace

import pytest

from skewgate.common import attest
from skewgate.verify.component import verify_op
from skewgate.verify.run import VerifyOptions


def test_verify_requires_by_default_what_promote_requires_by_default():
    """promote/run.py keeps its own copy of the step names (no step imports another): they must not drift."""
    from skewgate.common import steps
    from skewgate.promote import run as promote

    assert VerifyOptions().required == steps.RELEASE_GATE_STEPS == promote.REQUIRED_STEPS
    assert steps.STEPS == promote.STEPS and steps.TASK_NAMES == promote.TASK_NAMES


class _Metrics:
    def __init__(self):
        self.logged = {}

    def log_metric(self, name, value):
        self.logged[name] = value


def _outputs(tmp_path):
    return {name: SimpleNamespace(path=str(tmp_path / name), metadata={}) for name in ("verdict", "report")}


def test_a_registry_without_the_champion_fails_naming_it(tmp_path, mlflow_db):
    attest.generate_keys(tmp_path / "keys")
    pem = (tmp_path / "keys" / "skewgate.pub").read_text()
    out = _outputs(tmp_path)
    metrics = _Metrics()
    status = verify_op.python_func(model_name="nobody", tracking_uri=mlflow_db,
                                   trusted_public_keys=pem, verdict=out["verdict"], metrics=metrics,
                                   report=out["report"])
    verdict = json.loads((tmp_path / "verdict").read_text())
    assert status == "fail" and verdict["status"] == "fail"
    assert "no version of 'nobody' holds the alias 'champion'" in verdict["checks"][0]["detail"]
    assert metrics.logged["passed"] == 0.0


def test_no_trusted_key_fails_the_task(tmp_path, mlflow_db):
    out = _outputs(tmp_path)
    with pytest.raises(Exception, match="trusted public key"):
        verify_op.python_func(model_name="m", tracking_uri=mlflow_db, trusted_public_keys="",
                              verdict=out["verdict"], metrics=_Metrics(), report=out["report"])
