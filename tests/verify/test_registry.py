"""`skewgate verify` against a real MLflow registry (the embedded SQLite store) after a real `skewgate promote`:
it checks the file the registered MLmodel loads, the model name, version and alias the signed decision names, the
steps it required, and it gives up on a registry that does not answer within its deadline. Every refusal leaves
the registry as it was."""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import yaml
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.processes import free_port
from skewgate.common.recording import StepResult
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.export.run import ExportOptions
from skewgate.verify.run import OVERALL_GRACE_S
from tests.support.drip import DripServer

NAME = "digits"


@pytest.fixture
def registry(mlflow_db, tmp_path, tiny_onnx, keys, monkeypatch):
    """A store where `skewgate promote` made `digits` v1 the champion on a signed export verdict; returns
    (uri, promote), `promote(*flags)` promoting the same file again with extra flags."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("SKEWGATE_TRUSTED_KEYS", raising=False)
    monkeypatch.setenv("SKEWGATE_SIGNING_KEY", str(keys[0]))
    onnx_path = tmp_path / "candidate.onnx"
    onnx_path.write_bytes(tiny_onnx.read_bytes())
    verdicts = _signed_export(onnx_path, tmp_path / "verdicts", keys)
    uri = mlflow_db

    def promote(*flags):
        return _promote_cli(uri, onnx_path, verdicts, keys, *flags)

    return uri, promote


def _signed_export(onnx_path, folder, keys, *, passed=True):
    """`folder` holding an export verdict about `onnx_path` (passed or failed), signed as the step signs it."""
    folder.mkdir()
    verdict = Verdict.from_checks("export", [Check("c", passed=passed)],
                                  subject=Subject("m", sha256_file(onnx_path))).judged_with(ExportOptions())
    write_report(StepResult.unrecorded(verdict, str(keys[0])), folder / "export.json")
    return folder


def _promote_cli(uri, onnx_path, verdicts, keys, *flags):
    """`skewgate promote` of `onnx_path` on the evidence in `verdicts`, requiring export, trusting `keys`."""
    return main(["promote", "--model-name", NAME, "--onnx", str(onnx_path), "--verdicts", str(verdicts),
                 "--tracking-uri", uri, "--experiment", NAME, "--trusted-key", str(keys[1]), "--require", "export",
                 *flags])


def _verify(uri, keys, *flags, name=NAME, report=None):
    extra = ["--report", str(report)] if report else []
    return main(["verify", "--model-name", name, "--tracking-uri", uri, "--trusted-key", str(keys[1]), *flags,
                 *extra])


def _failed(report):
    return {c.name: c.detail for c in Verdict.read(report).checks if not c.passed}


def _snapshot(uri):
    """Everything verify could have changed: models, aliases, versions (tags, description, source), runs."""
    client = MlflowClient(uri)
    models = {m.name: dict(m.aliases) for m in client.search_registered_models()}
    versions = {(v.name, str(v.version)): (dict(v.tags), v.description, v.source)
                for name in models for v in client.search_model_versions(f"name='{name}'")}
    experiments = client.search_experiments()
    runs = {(r.info.run_id, r.info.status, tuple(sorted(r.data.tags.items())))
            for r in client.search_runs([e.experiment_id for e in experiments])}
    return models, versions, sorted(e.name for e in experiments), runs


def _model_dir(uri):
    """The champion's MLflow Model folder in the embedded store's artifact root (the registry's own files)."""
    client = MlflowClient(uri)
    champion = client.get_model_version_by_alias(NAME, "champion")
    source = client.get_model_version_download_uri(NAME, champion.version)
    assert source.startswith("file://"), source
    return Path(urlsplit(source).path)


def _other_model(tiny_onnx, path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(tiny_onnx))
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((4, 2), 7, np.float32), name="W"))
    onnx.save(model, str(path))


def _served(uri):
    """What `mlflow.pyfunc.load_model("models:/digits@champion")` predicts for ones(1, 4). The registry is named
    in the environment only: mlflow.set_registry_uri would outlive this test."""
    import mlflow.pyfunc

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", uri)
        patch.setenv("MLFLOW_REGISTRY_URI", uri)
        model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    return float(np.asarray(model.predict({"x": np.ones((1, 4), np.float32)})["y"]).ravel()[0])


@pytest.mark.parametrize("attack", ["gated-bytes-beside", "mlmodel-points-elsewhere"])
def test_verify_checks_the_file_the_registered_mlmodel_loads(registry, keys, tmp_path, tiny_onnx, attack):
    """#22 item 1: verify accepted any *.onnx with the gated digest while pyfunc served another model."""
    uri, promote = registry
    assert promote() == 0
    assert _verify(uri, keys, "--require", "export", report=tmp_path / "ok.json") == 0
    assert _served(uri) == 4.0  # ones(1, 4) @ ones(4, 2)
    model_dir = _model_dir(uri)
    if attack == "gated-bytes-beside":
        shutil.copyfile(model_dir / "model.onnx", model_dir / "orig.onnx")
        _other_model(tiny_onnx, model_dir / "model.onnx")
        loaded, other = "model.onnx", "orig.onnx"
    else:
        _other_model(tiny_onnx, model_dir / "new.onnx")
        mlmodel = yaml.safe_load((model_dir / "MLmodel").read_text())
        for flavour in ("onnx", "python_function"):
            mlmodel["flavors"][flavour]["data"] = "new.onnx"
        (model_dir / "MLmodel").write_text(yaml.safe_dump(mlmodel))
        loaded, other = "new.onnx", "model.onnx"
    assert _served(uri) == 28.0  # what a deployment would now serve: not the gated model
    before = _snapshot(uri)
    assert _verify(uri, keys, "--require", "export", report=tmp_path / "verify.json") == 1
    failed = _failed(tmp_path / "verify.json")
    assert set(failed) == {"artifact.sha256", "model.files"}
    assert failed["artifact.sha256"].startswith(f"{loaded} (the file MLmodel loads) has sha256 ")
    assert failed["model.files"] == f"other model files beside {loaded}: {other}"
    assert _snapshot(uri) == before


@pytest.mark.integration
def test_against_a_real_mlflow_server_verify_checks_what_it_serves(registry, keys, tmp_path, tiny_onnx):
    """The same over HTTP: a real `mlflow server` (its artifacts proxied), tampered with in its artifact store."""
    from tests.support.mlflow_server import mlflow_server

    _sqlite, _promote = registry
    onnx_path, verdicts = tmp_path / "candidate.onnx", tmp_path / "verdicts"
    with mlflow_server(tmp_path / "server") as uri:
        assert _promote_cli(uri, onnx_path, verdicts, keys) == 0
        assert _verify(uri, keys, "--require", "export") == 0
        assert _verify(uri, keys, "--alias", "staging", "--require", "export") == 1  # no such alias
        (mlmodel,) = (tmp_path / "server" / "artifacts").rglob("MLmodel")
        shutil.copyfile(mlmodel.parent / "model.onnx", mlmodel.parent / "orig.onnx")
        _other_model(tiny_onnx, mlmodel.parent / "model.onnx")
        before = _snapshot(uri)
        assert _verify(uri, keys, "--require", "export", report=tmp_path / "verify.json") == 1
        assert set(_failed(tmp_path / "verify.json")) == {"artifact.sha256", "model.files"}
        assert _snapshot(uri) == before


def test_a_registered_version_holds_one_model_file(registry, keys, tmp_path):
    """mlflow.onnx.save_model writes tensors of 1 KiB or more to an external-data file; promote replaces the
    re-serialised proto by the judged bytes and must not leave that file behind (verify would refuse it)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    uri, _promote = registry
    weight = numpy_helper.from_array(np.ones((64, 32), np.float32), name="W")  # 8 KiB
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "wide",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
                              initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    wide = tmp_path / "wide.onnx"
    onnx.save(model, str(wide))
    assert _promote_cli(uri, wide, _signed_export(wide, tmp_path / "wide-verdicts", keys), keys) == 0
    assert sorted(p.name for p in _model_dir(uri).iterdir() if p.suffix in (".onnx", ".data")) == ["model.onnx"]
    assert _verify(uri, keys, "--require", "export") == 0


def test_verify_binds_the_alias_the_model_name_and_the_required_steps(registry, keys, tmp_path):
    """#22 item 2: promoted under `staging` requiring only export, moved to `champion` by hand: verify passed."""
    uri, promote = registry
    client = MlflowClient(uri)
    assert promote("--alias", "staging") == 0
    client.set_registered_model_alias(NAME, "champion", "1")  # by hand: no gate ever promoted v1 as champion
    before = _snapshot(uri)

    assert _verify(uri, keys, "--alias", "champion", "--require", "export", report=tmp_path / "alias.json") == 1
    assert _failed(tmp_path / "alias.json") == {"attestation.promotion": "no skewgate.attestation.champion.uri tag: "
                                                "never promoted under 'champion'"}

    assert _verify(uri, keys, "--alias", "staging", report=tmp_path / "required.json") == 1  # default: every step
    failed = _failed(tmp_path / "required.json")
    assert failed["policy.required"] == ("the decision required export, not calibrate, drift, parity, probe, compare; "
                                         "asked for export, calibrate, drift, parity, probe, compare")
    assert {"evidence.calibrate", "evidence.probe"} <= set(failed)

    # another registered model pointing at the same files and evidence (tags copied): not what the gate promoted
    staging = client.get_model_version_by_alias(NAME, "staging")
    client.create_registered_model("copy")
    copy = client.create_model_version("copy", source=staging.source, tags=dict(staging.tags))
    client.set_registered_model_alias("copy", "staging", copy.version)
    assert _verify(uri, keys, "--alias", "staging", "--require", "export", name="copy",
                   report=tmp_path / "name.json") == 1
    assert "promoted 'digits' version 1 under alias 'staging', not 'copy'" in \
        _failed(tmp_path / "name.json")["attestation.promotion"]
    client.delete_registered_model("copy")

    assert _snapshot(uri) == before
    assert _verify(uri, keys, "--alias", "staging", "--require", "export,drift-gate") == 1  # task names resolve
    assert _verify(uri, keys, "--alias", "staging", "--require", "export") == 0


@pytest.mark.parametrize("store", ["sqlite", pytest.param("server", marks=pytest.mark.integration)])
def test_a_second_alias_never_changes_what_the_first_verifies(registry, keys, tmp_path, tiny_onnx, store):
    """#32 item 4: the champion's own file promoted again under `staging`, and refused under `canary` (a failing
    verdict): `verify --alias champion` still passes, and each alias verifies as its own decision says."""
    from tests.support.mlflow_server import mlflow_server

    sqlite_uri, _promote = registry
    onnx_path = tmp_path / "candidate.onnx"
    failing = _signed_export(onnx_path, tmp_path / "failing", keys, passed=False)

    def promote(uri, alias, verdicts):
        return _promote_cli(uri, onnx_path, verdicts, keys, "--alias", alias)

    def scenario(uri):
        assert promote(uri, "champion", tmp_path / "verdicts") == 0
        assert promote(uri, "staging", tmp_path / "verdicts") == 0
        assert promote(uri, "canary", failing) == 1
        for alias, code in (("champion", 0), ("staging", 0), ("canary", 1)):
            assert _verify(uri, keys, "--alias", alias, "--require", "export") == code, alias
        tags = MlflowClient(uri).get_model_version(NAME, "1").tags
        assert (tags["skewgate.promotion.champion.status"], tags["skewgate.promotion.staging.status"],
                tags["skewgate.promotion.canary.status"]) == ("promoted", "promoted", "refused")

    if store == "sqlite":
        scenario(sqlite_uri)
    else:
        with mlflow_server(tmp_path / "server") as uri:
            scenario(uri)


def test_an_attestations_tag_pointed_at_a_device_fails_without_reading_it(registry, keys, tmp_path):
    uri, promote = registry
    assert promote() == 0
    MlflowClient(uri).set_model_version_tag(NAME, "1", "skewgate.attestation.champion.uri", "/dev/zero")
    before = _snapshot(uri)
    assert _verify(uri, keys, "--require", "export", report=tmp_path / "zero.json") == 1
    assert "the attestations tag names '/dev/zero'" in _failed(tmp_path / "zero.json")["attestation.promotion"]
    assert _snapshot(uri) == before


@pytest.mark.parametrize("keys_section", ["revoked: [{keyid}]",
                                          "valid: {{{keyid}: {{not_after: '2026-01-01T00:00:00Z'}}}}"],
                         ids=["revoked", "expired"])
def test_a_key_the_policy_revoked_or_let_expire_is_trusted_by_neither_promote_nor_verify(registry, keys, tmp_path,
                                                                                        capsys, keys_section):
    from skewgate.common import attest

    uri, promote = registry
    assert promote() == 0
    (keyid,) = attest.load_trusted_keys([keys[1]])
    policy = tmp_path / "policy.yaml"
    policy.write_text("keys:\n  " + keys_section.format(keyid=keyid) + "\n")
    before = _snapshot(uri)
    assert _verify(uri, keys, "--require", "export", "--policy", str(policy)) == 2
    assert promote("--policy", str(policy), "--alias", "staging") == 2
    err = capsys.readouterr().err
    assert err.count(f"key {keyid[:16]}… is " + ("revoked" if "revoked" in keys_section else "valid from")) == 2
    assert _snapshot(uri)[:2] == before[:2]  # models, aliases and versions as they were
    assert _verify(uri, keys, "--require", "export") == 0


def test_a_version_promote_refused_fails_verify_when_the_alias_is_moved_onto_it_by_hand(registry, keys, tmp_path,
                                                                                       tiny_onnx):
    """A refused version carries promote's signed decision too, saying `fail`: moving the alias onto it by hand
    must not make it pass."""
    uri, promote = registry
    assert promote() == 0
    refused_file = tmp_path / "refused.onnx"
    _other_model(tiny_onnx, refused_file)
    failing = _signed_export(refused_file, tmp_path / "failing", keys, passed=False)
    assert _promote_cli(uri, refused_file, failing, keys) == 1
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "1"
    client.set_registered_model_alias(NAME, "champion", "2")  # by hand
    assert _verify(uri, keys, "--require", "export", report=tmp_path / "refused.json") == 1
    assert "the signed decision is 'fail' for version 2" in _failed(tmp_path / "refused.json")["attestation.promotion"]


def test_an_unknown_required_step_exits_2(registry, keys, capsys):
    uri, promote = registry
    assert promote() == 0
    assert _verify(uri, keys, "--require", "export,exprot") == 2
    assert "unknown step 'exprot' in --require; did you mean 'export'?" in capsys.readouterr().err


class _SilentServer:
    """A socket on 127.0.0.1 that accepts connections and never answers."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(64)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)

    def close(self):
        self.socket.close()
        for connection in self.connections:
            connection.close()


@pytest.mark.parametrize("server", ["closed-port", "never-answers"])
def test_verify_gives_up_at_its_deadline(keys, server):
    """#22 item 3: 249 s to exit 2 on a closed port, over 600 s against a socket that never answers."""
    silent = _SilentServer() if server == "never-answers" else None
    port = silent.port if silent else free_port()
    deadline = 2
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SKEWGATE_"))}
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "skewgate", "verify", "--model-name", NAME, "--trusted-key",
                               str(keys[1]), "--tracking-uri", f"http://127.0.0.1:{port}", "--mlflow-deadline",
                               str(deadline)], capture_output=True, text=True, timeout=deadline + 180, env=env)
    finally:
        if silent:
            silent.close()
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert f"MLflow at http://127.0.0.1:{port} unreachable for {deadline}s" in done.stderr
    assert ("Connection refused" if server == "closed-port" else "Read timed out") in done.stderr
    # The message says the deadline ended it; the bound keeps "minutes" (249 s and 600 s before) apart from the
    # deadline plus the interpreter's start, which took 22 s on a loaded CI machine.
    assert elapsed < deadline + 90, elapsed


@pytest.mark.parametrize("deadline_s", [4.0, 8.0])
def test_verify_against_a_server_that_drips_ends_at_its_overall_deadline(keys, deadline_s):
    """#32 item 7: a server that answers 200 then one byte every second defeats the per-read timeout; verify ends
    (exit 2, one line naming the deadline) within its --mlflow-deadline, not minutes later."""
    server = DripServer()
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "skewgate", "verify", "--model-name", "m", "--tracking-uri",
                               f"http://127.0.0.1:{server.port}", "--trusted-key", str(keys[1]),
                               "--mlflow-deadline", str(deadline_s)], capture_output=True, text=True, timeout=300)
        ended = time.monotonic()
    finally:
        server.close()
    assert done.returncode == 2, done.stderr
    assert "not done within the overall deadline of" in done.stderr, done.stderr
    whole = deadline_s + OVERALL_GRACE_S
    assert f"not done within the overall deadline of {whole:g} s" in done.stderr
    assert ended - started >= whole
    # The body would take 27 hours at one byte a second. Counted from the first request, so that a busy machine's
    # slow imports (22 s seen in CI) do not count; the margin is for a slow exit, far from "minutes later".
    assert server.first_request is not None and ended - server.first_request < whole + 30
