"""`skewgate verify` as a user runs it: a registry it cannot read as meant is exit 2 in one line, never a verdict
about an empty registry it made up."""

import os
import subprocess
import sys

import pytest

from skewgate.cli import main


@pytest.fixture
def public_key(tmp_path):
    assert main(["keys", "generate", "--out", str(tmp_path / "keys")]) == 0
    return tmp_path / "keys" / "skewgate.pub"


def _verify(uri, public_key):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run([sys.executable, "-m", "skewgate", "verify", "--model-name", "digits", "--trusted-key",
                           str(public_key), "--tracking-uri", uri], capture_output=True, text=True, timeout=120,
                          env=env)


def test_a_store_that_does_not_exist_exits_2_and_is_not_created(tmp_path, public_key):
    """MLflow would create an empty store (and its folder) and verify would then judge it: exit 1, 'no champion',
    for what was a typo in the path."""
    store = tmp_path / "nowhere" / "mlflow.db"
    done = _verify(f"sqlite:///{store}", public_key)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"skewgate verify: --tracking-uri: expected an existing MLflow store (skewgate never creates one; make it on "
        f"purpose with `mlflow db upgrade sqlite:///{store}`), found no registry at {store}"]
    assert not store.parent.exists()


def test_a_bare_path_exits_2_saying_what_to_write(tmp_path, public_key):
    done = _verify(str(tmp_path / "mlflow.db"), public_key)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (f"skewgate verify: --tracking-uri: expected a URI such as sqlite:////abs/path/mlflow.db, found a "
                    f"bare path '{tmp_path / 'mlflow.db'}'; write sqlite:///{tmp_path / 'mlflow.db'}")
