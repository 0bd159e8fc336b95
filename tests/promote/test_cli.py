"""`skewgate promote` end to end against a real embedded MLflow registry: exit codes and what it leaves."""

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common import mlflow_conventions as conv
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.processes import free_port
from skewgate.common.recording import StepResult, TrackingOptions
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.export.run import ExportOptions
from skewgate.parity.core import ParityOptions
from skewgate.promote.run import STEPS, TASK_NAMES, PromoteOptions, run


@pytest.fixture
def setup(mlflow_db, tmp_path, tiny_onnx, keys):
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(tiny_onnx.read_bytes())
    verdicts = tmp_path / "verdicts"
    uri = mlflow_db

    def write(status_ok=True):
        check = Check("c", passed=status_ok)
        verdict = Verdict.from_checks("export", [check], subject=Subject("m", sha256_file(onnx_path))
                                      ).judged_with(ExportOptions())
        verdicts.mkdir(exist_ok=True)
        # as a step's --report does
        write_report(StepResult.unrecorded(verdict, str(keys[0])), verdicts / "export.json")

    return onnx_path, verdicts, uri, write


def _promote(onnx_path, verdicts, uri, *extra, keys=None):
    trust = ["--trusted-key", str(keys[1])] if keys else []
    return main(["promote", "--model-name", "digits", "--onnx", str(onnx_path), "--verdicts", str(verdicts),
                 "--tracking-uri", uri, "--experiment", "digits", "--require", "export", *trust, *extra])


@pytest.fixture(autouse=True)
def _trust_the_test_key(keys, monkeypatch):
    monkeypatch.setenv("SKEWGATE_TRUSTED_KEYS", str(keys[1]))
    monkeypatch.setenv("SKEWGATE_SIGNING_KEY", str(keys[0]))


def test_pass_promotes_and_exits_0(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    champion = MlflowClient(uri).get_model_version_by_alias("digits", "champion")
    assert str(champion.version) == "1"
    assert champion.description.startswith("skewgate: promoted.") and "Pipeline run: [" in champion.description


def test_refusal_exits_1_and_leaves_no_alias(setup, capsys):
    onnx_path, verdicts, uri, write = setup
    write(status_ok=False)
    assert _promote(onnx_path, verdicts, uri) == 1
    assert "refused" in capsys.readouterr().err
    client = MlflowClient(uri)
    assert client.get_registered_model("digits").aliases == {}
    assert client.get_model_version("digits", "1").tags["skewgate.promotion.champion.status"] == "refused"


def test_onnx_changed_after_export_is_refused(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0  # champion = v1
    import onnx

    model = onnx.load(str(onnx_path))
    model.producer_name = "tampered"  # valid ONNX, different bytes, same verdicts
    onnx.save(model, str(onnx_path))
    assert _promote(onnx_path, verdicts, uri) == 1
    client = MlflowClient(uri)
    assert str(client.get_model_version_by_alias("digits", "champion").version) == "1"
    reason = client.get_model_version("digits", "2").tags["skewgate.promotion.champion.reason"]
    assert "the file to promote is" in reason


def test_promoting_twice_keeps_one_version(setup):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    assert _promote(onnx_path, verdicts, uri) == 0
    assert [str(v.version) for v in MlflowClient(uri).search_model_versions("name='digits'")] == ["1"]


def test_existing_version_of_unknown_model_exits_2_and_registers_nothing(setup, capsys):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri, "--version", "1") == 2
    assert "expected a registered model, found no such registered model" in capsys.readouterr().err
    assert MlflowClient(uri).search_registered_models() == []


@pytest.mark.parametrize("case", ["truncated-onnx", "missing-verdicts-dir"])
def test_bad_input_exits_2_and_registers_nothing(setup, case):
    onnx_path, verdicts, uri, write = setup
    write()
    if case == "truncated-onnx":
        data = onnx_path.read_bytes()
        onnx_path.write_bytes(data[: len(data) // 3])
    else:
        verdicts = verdicts.parent / "nowhere"
    assert _promote(onnx_path, verdicts, uri) == 2
    assert MlflowClient(uri).search_registered_models() == []


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs a POSIX /dev")
@pytest.mark.parametrize(("entry", "make", "found"), [
    ("zz.json", os.mkfifo, "found a FIFO"),
    ("zz.json", lambda p: p.symlink_to("/dev/zero"), "found a symbolic link to a character device (/dev/zero)"),
])
def test_an_entry_that_is_not_a_regular_file_exits_2_naming_it_and_registers_nothing(setup, entry, make, found):
    """In a process of its own with a timeout: a FIFO once blocked promote for ever (its MLflow run stayed
    RUNNING), a link to /dev/zero allocated until killed."""
    onnx_path, verdicts, uri, write = setup
    write()
    (verdicts / entry).unlink(missing_ok=True)
    make(verdicts / entry)
    done = subprocess.run([sys.executable, "-m", "skewgate", "promote", "--model-name", "digits", "--onnx",
                           str(onnx_path), "--verdicts", str(verdicts), "--tracking-uri", uri, "--experiment",
                           "digits", "--require", "export"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{verdicts / entry}: expected " in done.stderr and found in done.stderr
    client = MlflowClient(uri)
    assert client.search_registered_models() == []
    experiment = client.get_experiment_by_name("digits")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [r.data.tags.get("skewgate.step") for r in runs].count("promote") == 1
    assert runs and all(r.info.status != "RUNNING" for r in runs)  # the promote run and this call's parent ended


def test_unreachable_mlflow_exits_2(setup):
    onnx_path, verdicts, _uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, f"http://127.0.0.1:{free_port()}", "--mlflow-deadline", "1") == 2


def test_without_a_tracking_uri_exits_2(setup, monkeypatch):
    onnx_path, verdicts, _uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, "") == 2


def test_keys_generate_writes_a_private_key_only_its_owner_reads(keys, capsys):
    key, public = keys
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and public.read_text().startswith("-----BEGIN PUBLIC KEY")
    assert main(["keys", "generate", "--out", str(key.parent)]) == 2  # never overwrites a key
    assert "refusing to overwrite" in capsys.readouterr().err


def test_unsigned_evidence_is_refused_unless_explicitly_allowed(setup, monkeypatch):
    onnx_path, verdicts, uri, write = setup
    write()
    (verdicts / "export.intoto.jsonl").unlink()
    assert _promote(onnx_path, verdicts, uri) == 1
    monkeypatch.delenv("SKEWGATE_TRUSTED_KEYS")
    assert _promote(onnx_path, verdicts, uri) == 2  # no trusted key at all: cannot evaluate, as verify (#36)
    assert _promote(onnx_path, verdicts, uri, "--allow-unsigned") == 0


def _verify(uri, keys, *extra):
    """These promotions require `export` only: so must verify (its default is every release-gate step)."""
    return main(["verify", "--model-name", "digits", "--tracking-uri", uri, "--trusted-key", str(keys[1]),
                 "--require", "export", *extra])


def test_verify_rechecks_the_champion_from_the_registry_alone(setup, keys, tmp_path, monkeypatch):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    assert _verify(uri, keys, "--report", str(tmp_path / "verify.json")) == 0
    report = Verdict.read(tmp_path / "verify.json")
    assert {c.name for c in report.checks} == {"champion.resolved", "model.loads", "artifact.sha256", "model.files",
                                               "attestation.promotion", "policy.required", "evidence.export"}
    monkeypatch.delenv("SKEWGATE_TRUSTED_KEYS")
    other = tmp_path / "other"
    main(["keys", "generate", "--out", str(other)])
    assert _verify(uri, (None, other / "skewgate.pub")) == 1  # signed, but not by a key this deployment trusts
    assert main(["verify", "--model-name", "digits", "--tracking-uri", uri]) == 2  # no trusted key given


@pytest.mark.parametrize("target", ["model.onnx", "export.json", "promotion.intoto.jsonl"])
def test_verify_fails_when_the_registered_files_were_changed(setup, keys, tmp_path, target):
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    store = tmp_path / "artifacts"  # the embedded store keeps artifacts beside mlflow.db
    (path,) = [p for p in store.rglob(target) if "attestations" in str(p) or (target == "model.onnx"
               and "/model/" in str(p))]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    assert _verify(uri, keys) == 1


def test_verify_without_a_champion_exits_1(setup, keys):
    _onnx_path, _verdicts, uri, _write = setup
    main(["promote", "--model-name", "x", "--onnx", "nowhere", "--verdicts", "nowhere", "--tracking-uri", uri])
    assert _verify(uri, keys) == 1


def test_an_unknown_required_step_exits_2_naming_the_valid_ones_and_registers_nothing(setup):
    """Once "no verdict for this required step", exit 1, and a version registered (and tagged refused) on every
    attempt although only the setup was wrong."""
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0  # v1 is the champion
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("digits")
    assert experiment is not None
    runs_before = client.search_runs([experiment.experiment_id])
    onnx_path.write_bytes(onnx_path.read_bytes() + b"\0")  # another candidate, which would be registered as v2
    done = subprocess.run([sys.executable, "-m", "skewgate", "promote", "--model-name", "digits", "--onnx",
                           str(onnx_path), "--verdicts", str(verdicts), "--tracking-uri", uri, "--experiment",
                           "digits", "--require", "export,exprot"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("skewgate promote: unknown step 'exprot' in --require; did you mean 'export'? valid: "
                           "export, calibrate, drift, parity, probe, compare, preprocess, estimate (or the "
                           "pipeline's task names calibrate-int8, drift-gate, parity-diff, triton-probe, "
                           "compare-champion")
    assert [str(v.version) for v in client.search_model_versions("name='digits'")] == ["1"]
    assert len(client.search_runs([experiment.experiment_id])) == len(runs_before)  # no run was even started


def test_an_unknown_required_step_in_the_components_options_is_an_error_verdict_before_mlflow(setup, tmp_path):
    onnx_path, verdicts, _, write = setup
    uri = f"sqlite:///{tmp_path / 'never-opened.db'}"
    write()
    verdict = run(model_name="digits", onnx=onnx_path, verdicts_dir=verdicts,
                  options=PromoteOptions(required=("export", "triton_probe")),
                  tracking=TrackingOptions(uri=uri)).verdict
    assert verdict.status == "error" and "did you mean 'triton-probe'?" in verdict.message
    assert not Path(uri.removeprefix("sqlite:///")).exists()  # the store was not even opened


def test_the_pipelines_task_names_stand_for_their_steps(setup, keys):
    onnx_path, verdicts, uri, write = setup
    write()
    parity = Verdict.from_checks("parity", [Check("c", passed=True)], subject=Subject("m", sha256_file(onnx_path))
                                 ).judged_with(ParityOptions())
    write_report(StepResult.unrecorded(parity, str(keys[0])), verdicts / "parity.json")
    assert _promote(onnx_path, verdicts, uri, "--require", "export,parity-diff,Parity") == 0
    champion = MlflowClient(uri).get_model_version_by_alias("digits", "champion")
    assert "Required: export, parity;" in champion.description


def test_the_task_names_are_those_of_the_release_gate_pipeline():
    source = (Path(__file__).parents[2] / "components" / "skewgate" / "pipelines" / "release_gate.py").read_text()
    tasks = dict((name, step) for step, name in re.findall(r'sized\(\w+, "([\w-]+)", "([\w-]+)"\)', source)
                 if name != step and step in STEPS)  # gate-blocked judges no step
    assert tasks == TASK_NAMES
    assert set(TASK_NAMES.values()) <= set(STEPS) and not set(TASK_NAMES) & set(STEPS)


@pytest.mark.parametrize("alias", ["v7", "V12", "latest", "champion\n", "cham\npion", "", "a/b", "x" * 256])
def test_an_alias_mlflow_rejects_exits_2_in_one_line_and_leaves_the_registry_as_it_was(setup, capsys, alias):
    """Once: a version registered, tagged and attested, `promoted: true` logged, then exit 2 at the alias."""
    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0  # v1 is the champion
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("digits")
    assert experiment is not None
    runs_before = client.search_runs([experiment.experiment_id])
    tags_before = dict(client.get_model_version("digits", "1").tags)
    capsys.readouterr()
    onnx_path.write_bytes(onnx_path.read_bytes() + b"\0")  # another candidate, which would be registered as v2
    write()
    assert _promote(onnx_path, verdicts, uri, "--alias", alias) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("skewgate promote: --alias: expected ")
    assert [str(v.version) for v in client.search_model_versions("name='digits'")] == ["1"]
    assert dict(client.get_model_version("digits", "1").tags) == tags_before
    assert len(client.search_runs([experiment.experiment_id])) == len(runs_before)  # no run was even started


@pytest.mark.parametrize("alias", ["v7", "champion\n"])
def test_an_alias_mlflow_rejects_in_the_components_options_is_an_error_verdict_before_mlflow(setup, tmp_path, alias):
    onnx_path, verdicts, _, write = setup
    uri = f"sqlite:///{tmp_path / 'never-opened.db'}"
    write()
    verdict = run(model_name="digits", onnx=onnx_path, verdicts_dir=verdicts,
                  options=PromoteOptions(required=("export",), alias=alias), tracking=TrackingOptions(uri=uri)).verdict
    assert verdict.status == "error" and "--alias" in verdict.message
    assert not Path(uri.removeprefix("sqlite:///")).exists()  # the store was not even opened


def test_a_run_left_running_by_a_killed_promote_is_ended_killed_by_the_next_one(setup):
    from skewgate.common import mlflow_log

    onnx_path, verdicts, uri, write = setup
    write()
    assert _promote(onnx_path, verdicts, uri) == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("digits")
    assert experiment is not None
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    identity = mlflow_log.process_identity().rsplit(":", 2)
    # as a promote killed with -9 leaves them: its ad-hoc parent run and its step run, both RUNNING
    parent = client.create_run(experiment.experiment_id, run_name="skewgate-cli",
                               tags={"skewgate.role": "pipeline", "skewgate.pipeline_run_id": ""})
    step = client.create_run(experiment.experiment_id, run_name="promote", tags={
        "mlflow.parentRunId": parent.info.run_id, "skewgate.step": "promote",
        conv.PROMOTE_TARGET_TAG: "digits@champion",
        conv.PROCESS_TAG: f"{identity[0]}:{dead.stdout.strip()}:{identity[2]}"})
    # a run of another host, recent: its process cannot be checked, so it is left alone
    other = client.create_run(experiment.experiment_id, run_name="parity", tags={
        conv.PROCESS_TAG: "elsewhere:1:1"})
    assert _promote(onnx_path, verdicts, uri) == 0  # not held up by the dead contender either
    assert client.get_run(step.info.run_id).info.status == "KILLED"
    assert client.get_run(parent.info.run_id).info.status == "KILLED"
    assert "is gone" in client.get_run(step.info.run_id).data.tags["skewgate.ended_as_stale"]
    assert client.get_run(other.info.run_id).info.status == "RUNNING"
    ended = mlflow_log.end_stale_runs(mlflow_log.connect(uri, experiment="digits"), current_run_id="",
                                      older_than_s=0.0)
    assert other.info.run_id in ended and client.get_run(other.info.run_id).info.status == "KILLED"
