"""The compiled YAML is what users upload in the KFP UI: parse it back into the PipelineSpec proto."""

import json

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from skewgate.cli import main


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    out = tmp_path_factory.mktemp("yaml") / "release_gate.yaml"
    assert main(["pipeline", "compile", "--out", str(out)]) == 0
    documents = list(yaml.safe_load_all(out.read_text()))
    return json_format.ParseDict(documents[0], pipeline_spec_pb2.PipelineSpec())


def _gate(spec):
    """The tasks inside the exit handler (the whole gate; the root holds the handler and its exit task)."""
    return spec.components[spec.root.dag.tasks["exit-handler-1"].component_ref.name].dag.tasks


def test_pipeline_has_the_expected_tasks(spec):
    assert spec.pipeline_info.name == "skewgate-release-gate"
    assert set(spec.root.dag.tasks) == {"exit-handler-1", "finish-run-op"}
    tasks = _gate(spec)
    assert set(tasks) == {"importer", "importer-2", "importer-3", "importer-4", "importer-5", "export-op",
                          "calibrate-op", "drift-op", "parity-op", "triton-probe-op", "compare-op", "promote-op",
                          "condition-2"}
    assert sorted(tasks["promote-op"].dependent_tasks) == ["calibrate-op", "compare-op", "drift-op", "export-op",
                                                           "importer-2", "parity-op", "triton-probe-op"]


def test_parity_judges_the_calibrated_int8_model(spec):
    tasks = _gate(spec)
    int8 = tasks["parity-op"].inputs.artifacts["int8_model"].task_output_artifact
    assert (int8.producer_task, int8.output_artifact_key) == ("calibrate-op", "int8_model")
    assert tasks["calibrate-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    probe_model = tasks["triton-probe-op"].inputs.artifacts["onnx_model"].task_output_artifact
    assert probe_model.producer_task == "export-op"
    assert tasks["drift-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"


def test_parity_takes_the_optional_fp16_candidate(spec):
    parameter = _gate(spec)["parity-op"].inputs.parameters["fp16"]
    assert parameter.component_input_parameter.removeprefix("pipelinechannel--") == "fp16_candidate"
    assert spec.root.input_definitions.parameters["fp16_candidate"].default_value.bool_value is False


def test_promote_consumes_the_export_outputs(spec):
    artifacts = _gate(spec)["promote-op"].inputs.artifacts
    assert artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    assert artifacts["onnx_model"].task_output_artifact.output_artifact_key == "onnx_model"
    assert artifacts["export_verdict"].task_output_artifact.output_artifact_key == "verdict"
    assert artifacts["drift_verdict"].task_output_artifact.producer_task == "drift-op"
    required = _gate(spec)["promote-op"].inputs.parameters["required_steps"]
    assert required.runtime_value.constant.string_value == "export,calibrate,drift,parity,probe,compare"
    assert artifacts["compare_verdict"].task_output_artifact.producer_task == "compare-op"
    assert artifacts["calibrate_verdict"].task_output_artifact.producer_task == "calibrate-op"
    assert artifacts["parity_verdict"].task_output_artifact.producer_task == "parity-op"
    assert artifacts["probe_verdict"].task_output_artifact.producer_task == "triton-probe-op"


@pytest.mark.parametrize("gate", ["export-op", "calibrate-op", "drift-op", "parity-op", "triton-probe-op",
                                  "compare-op"])
def test_every_gate_hands_promote_its_signed_envelope_and_is_never_cached(spec, gate):
    tasks = _gate(spec)
    step = {"triton-probe-op": "probe"}.get(gate, gate.removesuffix("-op"))
    attestation = tasks["promote-op"].inputs.artifacts[f"{step}_attestation"].task_output_artifact
    assert (attestation.producer_task, attestation.output_artifact_key) == (gate, "attestation")
    assert tasks[gate].caching_options.enable_cache is False  # promote needs evidence logged in this run


def test_compare_judges_the_exported_model_on_the_eval_data_with_pipeline_thresholds(spec):
    tasks = _gate(spec)
    compare = tasks["compare-op"]
    assert compare.inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    examples = tasks["export-op"].inputs.artifacts["example_inputs"].task_output_artifact.producer_task
    assert compare.inputs.artifacts["eval_data"].task_output_artifact.producer_task == examples
    bound = {name: p.component_input_parameter.removeprefix("pipelinechannel--")
             for name, p in compare.inputs.parameters.items()}
    assert bound["thresholds"] == "compare_thresholds" and bound["max_churn"] == "compare_max_churn"
    assert bound["confidence"] == "compare_confidence" and bound["alias"] == "alias"
    params = spec.root.input_definitions.parameters
    assert params["compare_max_churn"].default_value.number_value == -1.0


def test_promote_is_uncached_and_not_retried(spec):
    promote = _gate(spec)["promote-op"]
    assert promote.caching_options.enable_cache is False
    assert not promote.HasField("retry_policy")


def test_refusal_branch_runs_gate_blocked(spec):
    condition = _gate(spec)["condition-2"]
    assert condition.trigger_policy.condition == (
        "inputs.parameter_values['pipelinechannel--promote-op-Output'] != 'pass'")
    inner = spec.components[condition.component_ref.name].dag.tasks
    assert set(inner) == {"blocked"}  # shown as gate-blocked


def test_inputs_and_image(spec):
    params = spec.root.input_definitions.parameters
    assert {"candidate_model", "eval_data", "calibration_data", "reference_data", "current_data", "model_name",
            "mlflow_tracking_uri", "alias", "triton_url", "max_accuracy_drop"} <= set(params)
    assert params["alias"].default_value.string_value == "champion"
    images = {e.container.image for e in _executors(spec)}
    assert images == {"skewgate:0.1.0"}


def _executors(spec):
    from kfp.pipeline_spec.pipeline_spec_pb2 import PipelineDeploymentConfig

    config = PipelineDeploymentConfig()
    json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec), config)
    return [e for e in config.executors.values() if e.HasField("container")]


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    out = tmp_path_factory.mktemp("yaml") / "nightly.yaml"
    assert main(["pipeline", "compile", "--pipeline", "nightly-drift", "--out", str(out)]) == 0
    return json_format.ParseDict(yaml.safe_load(out.read_text()), pipeline_spec_pb2.PipelineSpec())


def test_nightly_is_keyed_by_schedule_time_uncached_and_fails_on_drift(nightly):
    tasks = _gate(nightly)
    check = tasks["nightly-drift-op"]
    assert check.caching_options.enable_cache is False
    run_date = check.inputs.parameters["run_date"].runtime_value.constant.string_value
    assert run_date == "{{$.pipeline_job_schedule_time_utc}}"
    condition = tasks["condition-2"].trigger_policy.condition
    assert condition == "inputs.parameter_values['pipelinechannel--nightly-drift-op-Output'] == 'fail'"


def _resources(spec):
    """{executor label: (cpu request, cpu limit, memory request, memory limit, accelerator type, count)}"""
    out = {}
    for label, executor in _executor_map(spec).items():
        r = executor.container.resources
        out[label] = (r.resource_cpu_request, r.resource_cpu_limit, r.resource_memory_request,
                      r.resource_memory_limit, r.accelerator.resource_type, r.accelerator.resource_count)
    return out


def _executor_map(spec):
    from kfp.pipeline_spec.pipeline_spec_pb2 import PipelineDeploymentConfig

    config = PipelineDeploymentConfig()
    json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec), config)
    return {label: e for label, e in config.executors.items() if e.HasField("container")}


def _compile(tmp_path, *args):
    out = tmp_path / "pipeline.yaml"
    code = main(["pipeline", "compile", "--out", str(out), *args])
    if code != 0:
        return code
    return json_format.ParseDict(yaml.safe_load(out.read_text()), pipeline_spec_pb2.PipelineSpec())


def test_every_step_requests_and_limits_cpu_and_memory(spec):
    from skewgate.pipelines.resources import DEFAULTS

    resources = _resources(spec)
    assert set(resources) == {"exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-parity-op",
                              "exec-triton-probe-op", "exec-compare-op", "exec-promote-op", "exec-blocked",
                              "exec-finish-run-op"}
    for label, (cpu, cpu_limit, memory, memory_limit, accelerator, _count) in resources.items():
        assert cpu and cpu_limit and memory and memory_limit, label
        assert not accelerator, f"{label}: the CPU pipeline asks for no accelerator"
    parity = DEFAULTS["parity"]
    assert resources["exec-parity-op"][:4] == (parity.cpu_request, parity.cpu_limit, parity.memory_request,
                                               parity.memory_limit)


def test_resources_are_overridable_at_compile_time(tmp_path):
    override = tmp_path / "resources.json"
    override.write_text('{"parity": {"memory_limit": "8Gi", "cpu_request": "3"}}')
    resources = _resources(_compile(tmp_path, "--resources", str(override)))
    assert resources["exec-parity-op"][1:4] == ("2", "1Gi", "8Gi")
    assert resources["exec-parity-op"][0] == "3"
    assert resources["exec-export-op"][2] == "1Gi"  # the other steps keep their defaults


@pytest.mark.parametrize(("content", "named"), [
    ('{"parity": {"memory": "8Gi"}}', "parity.memory"),
    ('{"paritee": {"memory_limit": "8Gi"}}', "paritee"),
    ('{"parity": {"accelerator_limit": "1"}}', "parity.accelerator_limit"),
    ('["parity"]', "a JSON object keyed by step"),
], ids=["unknown-field", "unknown-step", "wrong-type", "not-an-object"])
def test_a_bad_resources_file_is_refused_with_its_field(tmp_path, capsys, content, named):
    override = tmp_path / "resources.json"
    override.write_text(content)
    assert _compile(tmp_path, "--resources", str(override)) == 2
    error = capsys.readouterr().err
    assert str(override) in error and named in error


def test_gpu_variant_gives_the_runtime_steps_a_gpu_and_the_gpu_image(tmp_path):
    gpu = _compile(tmp_path, "--variant", "gpu")
    assert gpu.pipeline_info.name == "skewgate-release-gate-gpu"
    resources = _resources(gpu)
    images = {label: e.container.image for label, e in _executor_map(gpu).items()}
    for label in ("exec-calibrate-op", "exec-parity-op", "exec-triton-probe-op"):
        assert resources[label][4:] == ("nvidia.com/gpu", "1")
        assert images[label] == "skewgate-gpu:0.1.0"
    for label in ("exec-export-op", "exec-drift-op", "exec-promote-op"):
        assert resources[label][4] == ""
        assert images[label] == "skewgate:0.1.0"


def test_nightly_has_no_gpu_variant(tmp_path, capsys):
    assert _compile(tmp_path, "--pipeline", "nightly-drift", "--variant", "gpu") == 2
    assert "--variant" in capsys.readouterr().err


@pytest.mark.parametrize("which", ["release-gate", "nightly-drift"])
def test_every_pipeline_parameter_is_described_for_the_kfp_ui(tmp_path, which):
    compiled = _compile(tmp_path, "--pipeline", which)
    params = compiled.root.input_definitions.parameters
    assert params
    for name, param in params.items():
        label, sep, text = param.description.partition(" — ")
        assert sep and label and len(text) > 10, f"{name}: {param.description!r}"
        assert "\n" not in param.description
    assert compiled.pipeline_info.display_name.startswith("skewgate ")


def test_steps_that_answer_about_a_live_server_are_uncached(spec):
    tasks = _gate(spec)
    for name in ("triton-probe-op", "parity-op", "promote-op"):
        assert tasks[name].caching_options.enable_cache is False, name
    assert spec.root.dag.tasks["finish-run-op"].caching_options.enable_cache is False


@pytest.mark.parametrize("which", ["release-gate", "nightly-drift"])
def test_the_exit_handler_ends_the_mlflow_run_whatever_happened(tmp_path, which):
    from kfp.pipeline_spec.pipeline_spec_pb2 import PipelineTaskSpec

    compiled = _compile(tmp_path, "--pipeline", which)
    finish = compiled.root.dag.tasks["finish-run-op"]
    assert finish.trigger_policy.strategy == PipelineTaskSpec.TriggerPolicy.ALL_UPSTREAM_TASKS_COMPLETED
    assert list(finish.dependent_tasks) == ["exit-handler-1"]
    assert finish.inputs.parameters["pipeline"].runtime_value.constant.string_value == which
    assert finish.inputs.parameters["final_status"].task_final_status.producer_task == "exit-handler-1"
    # the pipeline's answer is the outcome the exit handler wrote to MLflow
    output = compiled.root.dag.outputs.parameters["Output"].value_from_parameter
    assert output.producer_subtask == "finish-run-op"


def test_the_signing_secret_is_mounted_into_the_signing_steps_only(tmp_path):
    out = tmp_path / "signed.yaml"
    assert main(["pipeline", "compile", "--out", str(out), "--signing-secret", "skewgate-signing-key"]) == 0
    platform = list(yaml.safe_load_all(out.read_text()))[1]["platforms"]["kubernetes"]["deploymentSpec"]
    executors = platform["executors"]
    signing = {"exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-parity-op", "exec-triton-probe-op",
               "exec-compare-op", "exec-promote-op"}
    assert signing <= set(executors)
    for name in signing:
        (volume,) = executors[name]["secretAsVolume"]
        assert volume["secretName"] == "skewgate-signing-key"
        assert volume["mountPath"] == "/var/run/secrets/skewgate-signing"
    assert not {"exec-blocked", "exec-finish-run-op"} & set(executors)  # those never see the key
    with open(out) as handle:  # and the env var names the key inside the mount
        assert "/var/run/secrets/skewgate-signing/skewgate.key" in handle.read()


PIPELINE_NAMES = ["release-gate", "nightly-drift", "nightly-drift-fanout"]


def _container_components(compiled):
    """{component name: ComponentSpec} of the components a pod runs (KFP's importers included), not the DAGs."""
    executors = set(json_format.MessageToDict(compiled.deployment_spec)["executors"])
    return {name: c for name, c in compiled.components.items() if c.executor_label in executors}


@pytest.mark.parametrize("which", PIPELINE_NAMES)
def test_every_component_parameter_is_described(tmp_path, which):
    components = _container_components(_compile(tmp_path, "--pipeline", which))
    assert len(components) >= 4
    described = 0
    for name, component in components.items():
        for parameter_name, parameter in component.input_definitions.parameters.items():
            assert parameter.description.strip(), f"{name}.{parameter_name} has no description"
            assert "\n" not in parameter.description, f"{name}.{parameter_name}"
            described += 1
        for artifact_name, artifact in component.input_definitions.artifacts.items():
            assert artifact.description.strip(), f"{name}.{artifact_name} has no description"
    assert described >= 10


def test_component_descriptions_come_from_the_docstring_args(tmp_path):
    components = _container_components(_compile(tmp_path))
    export = components["comp-export-op"].input_definitions.parameters
    assert "skewgate export --tolerance" in export["tolerances"].description
    promote = components["comp-promote-op"].input_definitions.parameters
    assert "PEM public keys" in promote["trusted_public_keys"].description


def test_the_fanout_nightly_compiles_from_the_cli(tmp_path):
    compiled = _compile(tmp_path, "--pipeline", "nightly-drift-fanout")
    assert compiled.pipeline_info.name == "skewgate-nightly-drift-fanout"
    assert set(compiled.root.dag.tasks) == {"exit-handler-1", "finish-run-op"}
    tasks = _gate(compiled)
    assert {"nightly-drift-plan-op", "nightly-drift-merge-op"} <= set(tasks)
    (loop,) = [task for task in tasks.values() if task.HasField("parameter_iterator")]
    assert json.loads(loop.parameter_iterator.items.raw) == [0, 1, 2, 3]  # the default 4 shards
    merge = tasks["nightly-drift-merge-op"]
    assert merge.caching_options.enable_cache is False
    assert merge.inputs.parameters["run_date"].runtime_value.constant.string_value == (
        "{{$.pipeline_job_schedule_time_utc}}")
    assert compiled.root.dag.tasks["finish-run-op"].inputs.parameters["pipeline"].runtime_value.constant \
        .string_value == "nightly-drift"
    for label, resources in _resources(compiled).items():
        assert all(resources[:4]), f"{label} has no CPU/memory requests and limits"


def test_the_fanout_nightly_has_no_gpu_variant(tmp_path, capsys):
    assert _compile(tmp_path, "--pipeline", "nightly-drift-fanout", "--variant", "gpu") == 2
    assert "--variant" in capsys.readouterr().err


def _secret_env(out):
    """{executor label: [(secret name, key, env var)]} of the compiled YAML's Kubernetes platform spec."""
    documents = list(yaml.safe_load_all(out.read_text()))
    if len(documents) < 2:
        return {}
    executors = documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return {label: [(s["secretName"], kv["secretKey"], kv["envVar"]) for s in spec.get("secretAsEnv", [])
                    for kv in s["keyToEnv"]]
            for label, spec in executors.items() if spec.get("secretAsEnv")}


MLFLOW_TASKS = {
    "release-gate": {"exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-parity-op",
                     "exec-triton-probe-op", "exec-compare-op", "exec-promote-op", "exec-finish-run-op"},
    "nightly-drift": {"exec-nightly-drift-op", "exec-finish-run-op"},
    "nightly-drift-fanout": {"exec-nightly-drift-plan-op", "exec-nightly-drift-merge-op", "exec-finish-run-op"},
}


@pytest.mark.parametrize("which", PIPELINE_NAMES)
def test_the_mlflow_credentials_reach_every_step_that_talks_to_mlflow(tmp_path, which):
    out = tmp_path / "pipeline.yaml"
    assert main(["pipeline", "compile", "--pipeline", which, "--out", str(out), "--signing-secret", "key",
                 "--mlflow-secret", "mlflow-credentials"]) == 0
    env = _secret_env(out)
    assert set(env) == MLFLOW_TASKS[which]  # the blocked steps and the shards never see the credentials
    for label in MLFLOW_TASKS[which]:
        assert sorted(env[label]) == [("mlflow-credentials", "password", "MLFLOW_TRACKING_PASSWORD"),
                                      ("mlflow-credentials", "username", "MLFLOW_TRACKING_USERNAME")], label


def test_the_mlflow_secret_defaults_to_the_environment_the_chart_sets(tmp_path, monkeypatch):
    monkeypatch.setenv("SKEWGATE_MLFLOW_SECRET", "from-chart")
    out = tmp_path / "pipeline.yaml"
    assert main(["pipeline", "compile", "--pipeline", "nightly-drift", "--out", str(out)]) == 0
    assert {name for entries in _secret_env(out).values() for name, _, _ in entries} == {"from-chart"}


def test_without_an_mlflow_secret_no_step_gets_credentials(tmp_path, monkeypatch):
    monkeypatch.delenv("SKEWGATE_MLFLOW_SECRET", raising=False)
    out = tmp_path / "pipeline.yaml"
    assert main(["pipeline", "compile", "--out", str(out), "--signing-secret", "key"]) == 0
    assert _secret_env(out) == {}
