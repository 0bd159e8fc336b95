"""Concurrent promotions against a real `mlflow server`: one artifact promoted by several processes at once
ends with exactly one version, the alias on it, and one promotion-log record per attempt."""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from mlflow import MlflowClient

from skewgate.common import attest, mlflow_log
from skewgate.common.io import sha256_file
from skewgate.common.verdict import Check, Subject, Verdict

pytestmark = pytest.mark.integration
NAME = "races"
ATTEMPTS = 6


def test_concurrent_promotions_of_one_artifact_end_with_one_version(mlflow_url, tiny_onnx, tmp_path):
    key, public = attest.generate_keys(tmp_path / "keys")
    verdicts = tmp_path / "verdicts"
    verdict = Verdict.from_checks("export", [Check("c", passed=True)],
                                  subject=Subject("model.onnx", sha256_file(tiny_onnx)))
    path = verdict.write(verdicts / "export.json")
    attest.write_envelope(attest.sign(attest.verdict_statement(verdict), attest.load_signing_key(key)),
                          attest.envelope_path(path))
    command = [sys.executable, "-m", "skewgate.cli", "promote", "--model-name", NAME, "--onnx", str(tiny_onnx),
               "--verdicts", str(verdicts), "--require", "export", "--trusted-key", str(public),
               "--tracking-uri", mlflow_url, "--experiment", NAME, "-q"]

    def attempt(_):
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(ATTEMPTS) as pool:
        results = list(pool.map(attempt, range(ATTEMPTS)))
    assert [r.returncode for r in results] == [0] * ATTEMPTS, [r.stderr[-500:] for r in results]
    client = MlflowClient(mlflow_url)
    versions = client.search_model_versions(f"name='{NAME}'")
    assert len(versions) == 1
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == str(versions[0].version)
    records = mlflow_log.read_promotion_log(mlflow_log.connect(mlflow_url, experiment=NAME))
    assert len(records) == ATTEMPTS and all(r["promoted"] for r in records)
