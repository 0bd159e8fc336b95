"""`skewgate pipeline compile` as a user runs it: a fresh process, its stderr and exit status."""

import os
import subprocess
import sys

import pytest

WARNING = "every promotion on the cluster"


def _compile(tmp_path, *args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in {"SKEWGATE_SIGNING_SECRET", "SKEWGATE_MLFLOW_SECRET"}}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "skewgate.cli", "pipeline", "compile", "--out",
                           str(tmp_path / "pipeline.yaml"), *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_compiling_the_release_gate_without_a_signing_secret_warns_and_still_succeeds(tmp_path):
    result = _compile(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning" in result.stderr and WARNING in result.stderr
    assert "--signing-secret" in result.stderr  # and says what to do
    assert (tmp_path / "pipeline.yaml").is_file()


@pytest.mark.parametrize(("args", "env"), [(["--signing-secret", "skewgate-signing-key"], None),
                                           ([], {"SKEWGATE_SIGNING_SECRET": "skewgate-signing-key"}),
                                           (["--pipeline", "nightly-drift"], None)],
                         ids=["option", "environment", "nightly-signs-nothing-promote-reads"])
def test_no_warning_with_a_signing_secret_or_for_the_nightly(tmp_path, args, env):
    result = _compile(tmp_path, *args, env_extra=env)
    assert result.returncode == 0, result.stderr
    assert WARNING not in result.stderr
