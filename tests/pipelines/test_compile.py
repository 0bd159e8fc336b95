"""The compiled YAML is what users upload in the KFP UI: parse it back into the PipelineSpec proto."""

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


def test_pipeline_has_the_expected_tasks(spec):
    assert spec.pipeline_info.name == "skewgate-release-gate"
    tasks = spec.root.dag.tasks
    assert set(tasks) == {"importer", "importer-2", "importer-3", "importer-4", "importer-5", "export-op",
                          "calibrate-op", "drift-op", "parity-op", "triton-probe-op", "promote-op", "condition-1"}
    assert sorted(tasks["promote-op"].dependent_tasks) == ["calibrate-op", "drift-op", "export-op", "parity-op",
                                                           "triton-probe-op"]


def test_parity_judges_the_calibrated_int8_model(spec):
    tasks = spec.root.dag.tasks
    int8 = tasks["parity-op"].inputs.artifacts["int8_model"].task_output_artifact
    assert (int8.producer_task, int8.output_artifact_key) == ("calibrate-op", "int8_model")
    assert tasks["calibrate-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    probe_model = tasks["triton-probe-op"].inputs.artifacts["onnx_model"].task_output_artifact
    assert probe_model.producer_task == "export-op"
    assert tasks["drift-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"


def test_parity_takes_the_optional_fp16_candidate(spec):
    parameter = spec.root.dag.tasks["parity-op"].inputs.parameters["fp16"]
    assert parameter.component_input_parameter == "fp16_candidate"
    assert spec.root.input_definitions.parameters["fp16_candidate"].default_value.bool_value is False


def test_promote_consumes_the_export_outputs(spec):
    artifacts = spec.root.dag.tasks["promote-op"].inputs.artifacts
    assert artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    assert artifacts["onnx_model"].task_output_artifact.output_artifact_key == "onnx_model"
    assert artifacts["export_verdict"].task_output_artifact.output_artifact_key == "verdict"
    assert artifacts["drift_verdict"].task_output_artifact.producer_task == "drift-op"
    required = spec.root.dag.tasks["promote-op"].inputs.parameters["required_steps"]
    assert required.runtime_value.constant.string_value == "export,calibrate,drift,parity,probe"
    assert artifacts["calibrate_verdict"].task_output_artifact.producer_task == "calibrate-op"
    assert artifacts["parity_verdict"].task_output_artifact.producer_task == "parity-op"
    assert artifacts["probe_verdict"].task_output_artifact.producer_task == "triton-probe-op"


def test_promote_is_uncached_and_not_retried(spec):
    promote = spec.root.dag.tasks["promote-op"]
    assert promote.caching_options.enable_cache is False
    assert not promote.HasField("retry_policy")


def test_refusal_branch_runs_gate_blocked(spec):
    condition = spec.root.dag.tasks["condition-1"]
    assert condition.trigger_policy.condition == (
        "inputs.parameter_values['pipelinechannel--promote-op-Output'] != 'pass'")
    inner = spec.components[condition.component_ref.name].dag.tasks
    assert set(inner) == {"gate-blocked"}


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
    tasks = nightly.root.dag.tasks
    check = tasks["nightly-drift-op"]
    assert check.caching_options.enable_cache is False
    run_date = check.inputs.parameters["run_date"].runtime_value.constant.string_value
    assert run_date == "{{$.pipeline_job_schedule_time_utc}}"
    condition = tasks["condition-1"].trigger_policy.condition
    assert condition == "inputs.parameter_values['pipelinechannel--nightly-drift-op-Output'] == 'fail'"
