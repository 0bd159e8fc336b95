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
    assert set(tasks) == {"importer", "importer-2", "export-op", "promote-op", "condition-1"}
    assert tasks["promote-op"].dependent_tasks == ["export-op"]


def test_promote_consumes_the_export_outputs(spec):
    artifacts = spec.root.dag.tasks["promote-op"].inputs.artifacts
    assert artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    assert artifacts["onnx_model"].task_output_artifact.output_artifact_key == "onnx_model"
    assert artifacts["export_verdict"].task_output_artifact.output_artifact_key == "verdict"


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
    assert {"candidate_model", "eval_data", "model_name", "mlflow_tracking_uri", "alias"} <= set(params)
    assert params["alias"].default_value.string_value == "champion"
    images = {e.container.image for e in _executors(spec)}
    assert images == {"skewgate:0.1.0"}


def _executors(spec):
    from kfp.pipeline_spec.pipeline_spec_pb2 import PipelineDeploymentConfig

    config = PipelineDeploymentConfig()
    json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec), config)
    return [e for e in config.executors.values() if e.HasField("container")]
