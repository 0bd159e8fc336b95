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


WAYS = ("served-whole", "served-step-by-step", "served-step-by-step-from-initial-state")


def _ways(spec, *, estimated=False):
    """The three ways a candidate is served (whole; STEP from zeros; STEP from an initial state), each a branch of
    one condition holding parity, the probe and a condition on `estimate_accuracy`, whose two branches each hold
    promote (and, `estimated`, the estimate): branch name → {task name without KFP's `-N` suffix: (task, its name
    in the spec)} of the way's tasks and of the estimate branch `estimated` picks."""
    import re

    def named(tasks):
        return {re.sub(r"-\d+$", "", name): (task, name) for name, task in tasks.items()
                if not name.startswith("condition-branches")}

    branches = spec.components[_gate(spec)["condition-branches-2"].component_ref.name].dag.tasks
    ways = {}
    for branch in branches.values():
        tasks = spec.components[branch.component_ref.name].dag.tasks
        (inner,) = [task for name, task in tasks.items() if name.startswith("condition-branches")]
        (picked,) = [sub for sub in spec.components[inner.component_ref.name].dag.tasks.values()
                     if (sub.task_info.name == "estimate-accuracy") == estimated]
        ways[branch.task_info.name] = named(tasks) | named(spec.components[picked.component_ref.name].dag.tasks)
    return ways


def _producer(task, artifact):
    """`<producing task>-<its output>` of `artifact`, KFP's `-N` task suffix removed: inside a branch an outer
    task's output comes in as the branch's input `pipelinechannel--<task>-<output>`."""
    import re

    source = task.inputs.artifacts[artifact]
    if source.HasField("task_output_artifact"):
        produced = source.task_output_artifact
        return re.sub(r"-\d+$", "", produced.producer_task) + f"-{produced.output_artifact_key}"
    # `<task>-N-<output>` of a task in an outer branch
    return re.sub(r"-\d+(?=-[a-z_]+$)", "", source.component_input_artifact.removeprefix("pipelinechannel--"))


def test_pipeline_has_the_expected_tasks(spec):
    assert spec.pipeline_info.name == "skewgate-release-gate"
    assert set(spec.root.dag.tasks) == {"exit-handler-1", "finish-run-op"}
    assert set(_gate(spec)) == {"importer", "importer-2", "importer-3", "importer-4", "importer-5", "export-op",
                                "calibrate-op", "drift-op", "compare-op", "condition-branches-2"}
    ways = _ways(spec)
    assert set(ways) == set(WAYS)
    judged = {"parity-op", "triton-probe-op", "promote-op", "condition"}
    assert set(ways["served-whole"]) == judged
    assert set(ways["served-step-by-step"]) == judged | {"importer"}  # the STEP model
    assert set(ways["served-step-by-step-from-initial-state"]) == judged | {"importer"}
    assert set(_ways(spec, estimated=True)["served-whole"]) == judged | {"estimate-op"}
    branches = spec.components[_gate(spec)["condition-branches-2"].component_ref.name].dag.tasks.values()
    last = spec.components[next(b for b in branches if b.task_info.name == WAYS[2]).component_ref.name]
    assert len([name for name in last.dag.tasks if name.startswith("importer")]) == 2  # STEP, initial state
    assert all("stream_model" in branch.trigger_policy.condition for branch in branches)


@pytest.mark.parametrize("way", WAYS)
def test_parity_judges_the_calibrated_int8_model_and_the_probe_what_is_served(spec, way):
    tasks = {name: task for name, (task, _) in _ways(spec)[way].items()}
    assert _producer(tasks["parity-op"], "int8_model") == "calibrate-op-int8_model"
    assert _gate(spec)["calibrate-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == \
        "export-op"
    assert _gate(spec)["drift-op"].inputs.artifacts["onnx_model"].task_output_artifact.producer_task == "export-op"
    served = _producer(tasks["triton-probe-op"], "onnx_model")
    stream = tasks["triton-probe-op"].inputs.parameters.get("stream")
    if way == "served-whole":
        assert served == "export-op-onnx_model" and stream is None
        assert "stream_onnx" not in tasks["parity-op"].inputs.artifacts
        assert "stream_model" not in tasks["promote-op"].inputs.artifacts
    else:  # the STEP model, imported in the branch, is probed under the sequence batcher and driven by parity
        assert served == "importer-artifact" and stream.runtime_value.constant.bool_value is True
        for task, artifact in ((tasks["parity-op"], "stream_onnx"), (tasks["promote-op"], "stream_model")):
            assert _producer(task, artifact) == served
        states = tasks["parity-op"].inputs.parameters["states"].component_input_parameter
        assert states.removeprefix("pipelinechannel--") == "stream_states"
        initial = "initial_state" in tasks["triton-probe-op"].inputs.artifacts
        assert initial == (way == "served-step-by-step-from-initial-state")
        assert initial == ("initial_state" in tasks["parity-op"].inputs.artifacts)


def test_parity_takes_the_optional_fp16_candidate(spec):
    for way in WAYS:
        parameter = _ways(spec)[way]["parity-op"][0].inputs.parameters["fp16"]
        assert parameter.component_input_parameter.removeprefix("pipelinechannel--") == "fp16_candidate"
    assert spec.root.input_definitions.parameters["fp16_candidate"].default_value.bool_value is False


@pytest.mark.parametrize("estimated", [False, True], ids=["no-estimate", "estimate-accuracy"])
@pytest.mark.parametrize("way", WAYS)
def test_promote_consumes_the_export_outputs(spec, way, estimated):
    tasks = {name: task for name, (task, _) in _ways(spec, estimated=estimated)[way].items()}
    promote = tasks["promote-op"]
    assert _producer(promote, "onnx_model") == "export-op-onnx_model"
    assert _producer(promote, "export_verdict") == "export-op-verdict"
    required = promote.inputs.parameters["required_steps"]
    assert required.runtime_value.constant.string_value == \
        "export,calibrate,drift,parity,probe,compare" + (",estimate" if estimated else "")
    for step, task in (("drift", "drift-op"), ("compare", "compare-op"), ("calibrate", "calibrate-op"),
                       ("parity", "parity-op"), ("probe", "triton-probe-op")):
        assert _producer(promote, f"{step}_verdict") == f"{task}-verdict"
    handed = {"estimate_verdict", "estimate_attestation"} & set(promote.inputs.artifacts)
    assert handed == ({"estimate_verdict", "estimate_attestation"} if estimated else set())
    if estimated:
        assert _producer(promote, "estimate_attestation") == "estimate-op-attestation"


def test_the_estimate_fits_on_the_eval_data_and_estimates_on_the_current_data(spec):
    estimate = _ways(spec, estimated=True)["served-whole"]["estimate-op"][0]
    assert estimate.caching_options.enable_cache is False
    assert _producer(estimate, "onnx_model") == "export-op-onnx_model"
    examples = _gate(spec)["export-op"].inputs.artifacts["example_inputs"].task_output_artifact.producer_task
    currents = _gate(spec)["drift-op"].inputs.artifacts["current_data"].task_output_artifact.producer_task
    for artifact, importer in (("reference_data", examples), ("current_data", currents)):  # KFP's `-N` kept
        assert estimate.inputs.artifacts[artifact].component_input_artifact == f"pipelinechannel--{importer}-artifact"
    bound = {name: p.component_input_parameter.removeprefix("pipelinechannel--")
             for name, p in estimate.inputs.parameters.items() if p.component_input_parameter}
    assert bound["features"] == "estimate_features" and bound["max_drop"] == "estimate_max_drop"
    params = spec.root.input_definitions.parameters
    assert params["estimate_accuracy"].default_value.bool_value is False  # as the nightly's
    assert params["estimate_max_drop"].default_value.number_value == 0.02


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("gate", ["export-op", "calibrate-op", "drift-op", "parity-op", "triton-probe-op",
                                  "compare-op"])
def test_every_gate_hands_promote_its_signed_envelope_and_is_never_cached(spec, gate, way):
    tasks = {name: task for name, (task, _) in _ways(spec)[way].items()}
    step = {"triton-probe-op": "probe"}.get(gate, gate.removesuffix("-op"))
    assert _producer(tasks["promote-op"], f"{step}_attestation") == f"{gate}-attestation"
    task = tasks.get(gate) or _gate(spec)[gate]
    assert task.caching_options.enable_cache is False  # promote needs evidence logged in this run


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
    assert params["compare_max_churn"].default_value.string_value == ""


@pytest.mark.parametrize("estimated", [False, True], ids=["no-estimate", "estimate-accuracy"])
@pytest.mark.parametrize("way", WAYS)
def test_promote_is_uncached_and_not_retried_and_a_refusal_runs_gate_blocked(spec, way, estimated):
    tasks = _ways(spec, estimated=estimated)[way]
    (promote, promote_name), (condition, _) = tasks["promote-op"], tasks["condition"]
    assert promote.caching_options.enable_cache is False
    assert not promote.HasField("retry_policy")
    assert condition.trigger_policy.condition == (
        f"inputs.parameter_values['pipelinechannel--{promote_name}-Output'] != 'pass'")
    inner = spec.components[condition.component_ref.name].dag.tasks
    assert [n.rstrip("-0123456789") for n in inner] == ["blocked"]  # shown as gate-blocked


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
    condition = tasks["condition-4"].trigger_policy.condition
    assert condition == "inputs.parameter_values['pipelinechannel--nightly-drift-op-Output'] == 'fail'"


def test_the_nightly_estimates_accuracy_only_when_asked_and_a_failed_estimate_fails_the_run(nightly):
    tasks = _gate(nightly)
    assert tasks["condition-2"].trigger_policy.condition == \
        "inputs.parameter_values['pipelinechannel--estimate_accuracy'] == true"
    assert nightly.root.input_definitions.parameters["estimate_accuracy"].default_value.bool_value is False
    branch = nightly.components[tasks["condition-2"].component_ref.name].dag.tasks
    estimate = branch["nightly-estimate-op"]
    assert estimate.caching_options.enable_cache is False
    assert estimate.inputs.parameters["run_date"].runtime_value.constant.string_value == \
        "{{$.pipeline_job_schedule_time_utc}}"
    assert branch["condition-3"].trigger_policy.condition == \
        "inputs.parameter_values['pipelinechannel--nightly-estimate-op-Output'] == 'fail'"


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
    import re

    from skewgate.pipelines.resources import DEFAULTS

    resources = _resources(spec)
    assert {re.sub(r"-\d+$", "", label) for label in resources} == {
        "exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-parity-op", "exec-triton-probe-op",
        "exec-compare-op", "exec-estimate-op", "exec-promote-op", "exec-blocked", "exec-finish-run-op"}
    for way in (2, 3):  # each way of serving the candidate sizes its steps alike
        for step in ("parity-op", "triton-probe-op", "estimate-op"):
            assert resources[f"exec-{step}-{way}"] == resources[f"exec-{step}"]
    for copy in range(2, 7):  # promote with and without the estimate, in each way
        for step in ("promote-op", "blocked"):
            assert resources[f"exec-{step}-{copy}"] == resources[f"exec-{step}"]
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
    for label in ("exec-calibrate-op", "exec-parity-op", "exec-triton-probe-op", "exec-parity-op-3",
                  "exec-triton-probe-op-2"):
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
    for way in WAYS:
        for name in ("triton-probe-op", "parity-op", "promote-op"):
            assert _ways(spec)[way][name][0].caching_options.enable_cache is False, (way, name)
        assert _ways(spec, estimated=True)[way]["promote-op"][0].caching_options.enable_cache is False, way
    for name in ("export-op", "calibrate-op", "drift-op", "compare-op"):
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
    signing = {"exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-compare-op", *RELEASE_GATE_COPIES}
    assert signing <= set(executors)
    for name in signing:
        (volume,) = executors[name]["secretAsVolume"]
        assert volume["secretName"] == "skewgate-signing-key"
        assert volume["mountPath"] == "/var/run/secrets/skewgate-signing"
    assert not {"exec-blocked", "exec-blocked-2", "exec-blocked-3", "exec-finish-run-op"} & set(executors)
    with open(out) as handle:  # and the env var names the key inside the mount
        assert "/var/run/secrets/skewgate-signing/skewgate.key" in handle.read()


PIPELINE_NAMES = ["release-gate", "nightly-drift", "nightly-drift-fanout"]
# The release gate's steps that each way of serving (whole, STEP from zeros, from an initial state) runs in copies
# of its own: parity, the probe and the estimate once per way, promote with and without the estimate in each.
RELEASE_GATE_COPIES = {f"exec-{step}{suffix}" for step in ("parity-op", "triton-probe-op", "estimate-op")
                       for suffix in ("", "-2", "-3")} | {
    "exec-promote-op", *(f"exec-promote-op-{copy}" for copy in range(2, 7))}


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


def test_the_fanout_nightly_estimates_per_shard_only_when_asked_and_merges_once(tmp_path):
    compiled = _compile(tmp_path, "--pipeline", "nightly-drift-fanout")
    assert compiled.root.input_definitions.parameters["estimate_accuracy"].default_value.bool_value is False
    (branch_task,) = [t for t in _gate(compiled).values()
                      if t.trigger_policy.condition == "inputs.parameter_values['pipelinechannel--estimate_accuracy'] "
                                                       "== true"]
    branch = compiled.components[branch_task.component_ref.name].dag.tasks
    assert {"nightly-estimate-plan-op", "nightly-estimate-merge-op"} <= set(branch)
    ((loop_name, loop),) = [(name, task) for name, task in branch.items() if task.HasField("parameter_iterator")]
    assert json.loads(loop.parameter_iterator.items.raw) == [0, 1, 2, 3]  # the drift shards' files, dealt alike
    shard = compiled.components[loop.component_ref.name].dag.tasks["estimate-partial-op"]
    for name in ("onnx_model", "profile"):  # fetched once, for every shard
        assert shard.inputs.artifacts[name].component_input_artifact == \
            f"pipelinechannel--nightly-estimate-plan-op-{name}"
    merge = branch["nightly-estimate-merge-op"]
    assert merge.inputs.artifacts["partials"].task_output_artifact.producer_task == loop_name
    for task in (shard, merge):  # the model's input columns reach every task that reads the snapshot
        assert task.inputs.parameters["features"].component_input_parameter == "pipelinechannel--estimate_features"
    assert merge.caching_options.enable_cache is False


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
    "release-gate": {"exec-export-op", "exec-calibrate-op", "exec-drift-op", "exec-compare-op",
                     "exec-finish-run-op", *RELEASE_GATE_COPIES},
    "nightly-drift": {"exec-nightly-drift-op", "exec-nightly-estimate-op", "exec-finish-run-op"},
    "nightly-drift-fanout": {"exec-nightly-drift-plan-op", "exec-nightly-drift-merge-op", "exec-finish-run-op",
                             "exec-nightly-estimate-plan-op", "exec-nightly-estimate-merge-op"},
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
