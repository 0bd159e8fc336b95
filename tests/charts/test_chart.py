"""The Helm chart, offline: lint, render, Kubernetes schemas, hardening, and the image the pipelines use."""

import json
import os
import subprocess
import sys
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "skewgate"
KUBE_VERSION = "1.30.0"
VALUES = {
    "default": {},
    "private-registry": yaml.safe_load((CHART / "ci" / "values-private-registry.yaml").read_text()),
    "triton-gpu": yaml.safe_load((CHART / "ci" / "values-triton-gpu.yaml").read_text()),
}
NIGHTLY = {"nightlyDrift": {"enabled": True, "cron": "0 0 2 * * *", "servingSnapshot": "s3://logs/latest.parquet"}}


def render(values: dict) -> list[dict]:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values=values, name="skewgate", namespace="ml")
    return [doc for path, text in rendered.items() if path.endswith(".yaml")
            for doc in yaml.safe_load_all(text) if doc]


def kinds(docs: list[dict]) -> dict[str, dict]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in docs}


@pytest.mark.parametrize("name", VALUES)
def test_chart_lints_clean(name):
    report = helm.lint(CHART, VALUES[name], strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []  # warnings and errors


@pytest.mark.parametrize("name", VALUES)
def test_every_manifest_validates_against_the_kubernetes_schemas(name):
    docs = render(VALUES[name])
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("name", VALUES)
def test_pods_run_hardened(name):
    for doc in render(VALUES[name]):
        if doc["kind"] not in {"Job", "Deployment"}:
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True
            assert security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]
            assert {"cpu", "memory"} <= set(container["resources"]["limits"])
            assert any(m["mountPath"] == "/tmp" for m in container["volumeMounts"])  # writable scratch


def test_default_install_uploads_pipelines_without_a_recurring_run():
    docs = kinds(render({}))
    assert set(docs) == {"ConfigMap/skewgate-gates", "ServiceAccount/skewgate", "Role/skewgate-runner",
                         "RoleBinding/skewgate-runner", "Job/skewgate-schedule"}
    job = docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert job["command"] == ["skewgate", "pipeline", "schedule"] and "--no-recurring-run" in job["args"]


def test_nightly_schedule_passes_the_cron_and_snapshot():
    docs = kinds(render(NIGHTLY))
    job = docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]
    assert "--no-recurring-run" not in job["args"] and "--cron=$(NIGHTLY_CRON)" in job["args"]
    config = docs["ConfigMap/skewgate-gates"]["data"]
    assert config["NIGHTLY_CRON"] == "0 0 2 * * *" and config["SERVING_SNAPSHOT"] == "s3://logs/latest.parquet"
    assert docs["Job/skewgate-schedule"]["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"


def test_nightly_without_a_snapshot_is_refused():
    with pytest.raises(helm.HelmError, match=r"nightlyDrift\.servingSnapshot is required"):
        render({"nightlyDrift": {"enabled": True, "cron": "0 0 2 * * *"}})


def test_mlflow_credentials_come_from_the_named_secret():
    docs = kinds(render(VALUES["private-registry"]))
    env = {e["name"]: e for e in docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-credentials",
                                                                             "key": "password"}
    rules = docs["Role/skewgate-runner"]["rules"]
    assert {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["mlflow-credentials"],
            "verbs": ["get"]} in rules


def test_the_mlflow_secret_reaches_the_compiled_step_pods(tmp_path):
    """The schedule Job compiles the pipelines with the gates ConfigMap as its environment: the Secret it names
    must end up in the platform spec of every step that talks to MLflow, not only in the Job."""
    docs = kinds(render(VALUES["private-registry"]))
    config = docs["ConfigMap/skewgate-gates"]["data"]
    assert config["SKEWGATE_MLFLOW_SECRET"] == "mlflow-credentials"
    assert kinds(render({}))["ConfigMap/skewgate-gates"]["data"]["SKEWGATE_MLFLOW_SECRET"] == ""
    env = {**os.environ, "SKEWGATE_MLFLOW_SECRET": config["SKEWGATE_MLFLOW_SECRET"]}
    out = tmp_path / "release_gate.yaml"
    subprocess.run([sys.executable, "-m", "skewgate.cli", "pipeline", "compile", "--out", str(out)], env=env,
                   check=True, capture_output=True)
    executors = list(yaml.safe_load_all(out.read_text()))[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for label in ("exec-export-op", "exec-promote-op", "exec-finish-run-op"):
        keys = {(s["secretName"], kv["envVar"]) for s in executors[label]["secretAsEnv"] for kv in s["keyToEnv"]}
        assert keys == {("mlflow-credentials", "MLFLOW_TRACKING_USERNAME"),
                        ("mlflow-credentials", "MLFLOW_TRACKING_PASSWORD")}, label


def test_triton_deployment_takes_gpu_resources():
    docs = kinds(render(VALUES["triton-gpu"]))
    container = docs["Deployment/skewgate-triton"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert docs["Service/skewgate-triton"]["spec"]["ports"][0]["port"] == 8000


@pytest.mark.parametrize(("values", "field"), [
    pytest.param({"nightlyDrift": {"enabled": True, "cron": "0 2 * * *"}}, "cron", id="five-field-cron"),
    pytest.param({"securityContext": {"readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False,
                                      "capabilities": {"drop": ["ALL"]}}}, "readOnlyRootFilesystem",
                 id="writable-root"),
    pytest.param({"image": {"repository": "skewgate", "pullPolicy": "Always", "digest": "latest"}}, "digest",
                 id="digest-not-sha256"),
    pytest.param({"gates": {"allowWarn": False, "maxAccuracyDrop": 5, "maxSamples": 64}}, "maxAccuracyDrop",
                 id="drop-above-1"),
])
def test_schema_rejects_bad_values(values, field):
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmError, match=field):
        chart.validate_schema(values)


def test_rendered_image_is_the_one_the_compiled_pipelines_use(tmp_path):
    docs = kinds(render(VALUES["private-registry"]))
    image = docs["Job/skewgate-schedule"]["spec"]["template"]["spec"]["containers"][0]["image"]
    config = docs["ConfigMap/skewgate-gates"]["data"]
    env = {**os.environ, "SKEWGATE_IMAGE": config["SKEWGATE_IMAGE"],
           "SKEWGATE_IMAGE_DIGEST": config["SKEWGATE_IMAGE_DIGEST"]}
    out = tmp_path / "release_gate.yaml"
    # a fresh process: the image is read when the components are defined, as in the chart's Job
    subprocess.run([sys.executable, "-m", "skewgate.cli", "pipeline", "compile", "--out", str(out)], env=env,
                   check=True, capture_output=True)
    executors = yaml.safe_load(out.read_text())["deploymentSpec"]["executors"]
    images = {e["container"]["image"] for e in executors.values() if "container" in e}
    assert images == {image}
    assert image.startswith("registry.example.com/ml/skewgate:0.1.0@sha256:")


def test_dockerfiles_pass_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    dockerfiles = sorted(str(p) for p in (ROOT / "docker").glob("Dockerfile*"))
    result = subprocess.run([str(hadolint), "--format", "json", *dockerfiles], capture_output=True, text=True)
    assert result.returncode == 0, json.loads(result.stdout or "[]")


def test_the_signing_secret_and_trusted_keys_reach_the_schedule_job_as_configuration():
    pem = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"
    docs = kinds(render({"signing": {"keySecret": "skewgate-signing-key", "trustedPublicKeys": pem}}))
    gates = docs["ConfigMap/skewgate-gates"]["data"]
    assert gates["SKEWGATE_SIGNING_SECRET"] == "skewgate-signing-key" and gates["TRUSTED_PUBLIC_KEYS"] == pem
    # the private key itself is never rendered into the chart: only the Secret's name travels
    assert "PRIVATE KEY" not in json.dumps(docs)
