"""The release-gate pipeline: export → calibrate-int8 → (drift ∥ parity-diff ∥ triton-probe ∥ compare
[∥ estimate]) → promote.

Given a stateful model's STEP model (`stream_model`: the model as served, one step at a time with its state fed
back), parity also drives STEP step by step against the candidate on whole sequences, the probe deploys STEP under
Triton's sequence batcher instead of the candidate, and promote requires their stream checks and registers STEP
beside as `<model>-step`. KFP cannot hand an optional artifact to a task, so the three ways (no STEP model; STEP
from zeros; STEP from `stream_initial_state`) are three branches of one condition, each ending in promote.

With `estimate_accuracy`, an estimate task fits the calibration of the candidate's scores on `eval_data` (its
labels) and estimates its accuracy on `current_data`; promote then requires its verdict too and records its
estimate profile with the version, which the nightly's `estimate_accuracy` reads. Each way of serving therefore
ends in two promote tasks, one under each value of the flag (the same reason: no optional artifact).

Promote runs last, uncached and never retried by KFP (a refusal is an answer, not a transient error); when it
refuses, `plumbing.blocked` (shown as `gate-blocked`) fails the run so the KFP UI and alerting show the block. An
exit handler ends the run's MLflow parent run with the outcome. Every step has CPU/memory requests and limits
(`resources.py`); the GPU variant gives calibrate, parity and the probe a GPU and the GPU image. Parity and the
probe are uncached: with `triton_url` set their answer is about a live server, not about their inputs.
"""

from pathlib import Path
from typing import Any

from kfp import dsl

from skewgate.calibrate.component import calibrate_op
from skewgate.common.images import GPU_IMAGE
from skewgate.compare.component import compare_op
from skewgate.drift.component import drift_op
from skewgate.estimate.component import estimate_op
from skewgate.export.component import export_op
from skewgate.parity.component import parity_op
from skewgate.pipelines.credentials import mlflow_secret, mount_mlflow_credentials
from skewgate.pipelines.finalize import add_finisher
from skewgate.pipelines.plumbing import blocked as blocked_op
from skewgate.pipelines.resources import Variant, apply, load_resources, one_line_descriptions
from skewgate.pipelines.signing import mount_signing_key, signing_secret
from skewgate.probe.component import triton_probe_op
from skewgate.promote.component import promote_op
from skewgate.promote.run import REQUIRED_STEPS


def build_release_gate(*, resources_file: Path | None = None, variant: Variant = "cpu",
                       signing_secret_name: str | None = None, mlflow_secret_name: str | None = None) -> Any:
    """The pipeline, with the resources of `resources_file` (else `$SKEWGATE_RESOURCES`, else the defaults), and
    the signing key mounted from the Secret `signing_secret_name` (else `$SKEWGATE_SIGNING_SECRET`; empty: the
    steps sign only where `$SKEWGATE_SIGNING_KEY` is already set, as with kfp.local), and the MLflow credentials
    of the Secret `mlflow_secret_name` (else `$SKEWGATE_MLFLOW_SECRET`; empty: none) in every step that talks to
    MLflow. Long on purpose: a KFP pipeline is one function whose body is the DAG and whose docstring documents every
    parameter for the KFP UI; what repeats (parity, probe and promote in each way of serving) is one inner
    function."""
    resources = load_resources(resources_file, variant=variant)
    gpu_image = GPU_IMAGE if variant == "gpu" else ""
    secret = signing_secret(signing_secret_name)
    credentials = mlflow_secret(mlflow_secret_name)

    def sized(task: Any, step: str, name: str) -> Any:
        task.set_display_name(name)
        mount_signing_key(task, step, secret)
        mount_mlflow_credentials(task, step, credentials)
        return apply(task, step, resources, gpu_image=gpu_image)

    @dsl.pipeline(
        name="skewgate-release-gate" + ("-gpu" if variant == "gpu" else ""),
        display_name="skewgate release gate" + (" (GPU)" if variant == "gpu" else ""),
        description="Gate MLflow registry promotion of a PyTorch model on export, INT8 calibration, drift, "
                    "layerwise parity, a Triton probe and a comparison with the current champion.",
    )
    def release_gate(
        candidate_model: str,
        eval_data: str,
        reference_data: str,
        current_data: str,
        calibration_data: str,
        model_name: str,
        mlflow_tracking_uri: str,
        alias: str = "champion",
        allow_warn: bool = False,
        max_samples: int = 64,
        triton_url: str = "",
        max_accuracy_drop: float = 0.01,
        trusted_public_keys: str = "",
        allow_unsigned: bool = False,
        compare_thresholds: str = "",
        compare_confidence: float = 0.95,
        compare_max_churn: str = "",
        compare_task: str = "auto",
        fp16_candidate: bool = False,
        policy: str = "",
        stream_model: str = "",
        stream_states: str = "",
        stream_initial_state: str = "",
        drift_timestamp: str = "",
        drift_period: str = "none",
        estimate_accuracy: bool = False,
        estimate_features: str = "",
        estimate_max_drop: float = 0.02,
    ) -> str:
        """Gate the promotion of one candidate; returns the outcome (`promoted`), which the exit handler
        `finish-mlflow-run` also writes to the MLflow parent run. A refused promotion fails the run in
        `gate-blocked` (outcome `blocked`).

        Args:
            candidate_model: Candidate model — URI of the torch.export `.pt2` to gate (no pickle).
            eval_data: Evaluation data — URI of the `.npz` of example inputs named as the model's inputs, with a
                `labels` array for the INT8 accuracy budget; export, parity and the probe run on it.
            reference_data: Reference features — URI of the training features (Parquet, CSV or `.npz`), the
                drift baseline.
            current_data: Current features — URI of the validation or recent serving features to compare with
                the reference (same columns).
            calibration_data: Calibration data — URI of the `.npz` of INT8 calibration inputs.
            model_name: Registered model — the MLflow registered model (and experiment) name.
            mlflow_tracking_uri: MLflow tracking URI — e.g. `https://mlflow.example.com`; credentials come from
                the pod's MLFLOW_TRACKING_USERNAME/PASSWORD.
            alias: Registry alias — set on the promoted version (default `champion`).
            allow_warn: Accept warnings — promote when a step's verdict is `warn` (default: only `pass`).
            max_samples: Export samples — example inputs compared between PyTorch and ONNX Runtime at export.
            triton_url: Triton URL — `host:port` of a live Triton to probe and parity-check; empty: the probe
                starts its own tritonserver in its pod.
            max_accuracy_drop: INT8 accuracy budget — largest top-1 accuracy drop of the INT8 model (0.01 = 1
                point).
            trusted_public_keys: Trusted public keys — PEM public keys whose signatures promote accepts (the
                steps sign with the key at `$SKEWGATE_SIGNING_KEY`, a mounted Secret). Required: empty, promote
                cannot evaluate and nothing is promoted (unless allow_unsigned).
            allow_unsigned: Accept unsigned evidence — local experiments only: anyone could have written it.
            compare_thresholds: Compare thresholds — as `skewgate compare --threshold`, `;`-separated (empty:
                the defaults), judged against the `alias` version on `eval_data` (`labels`, `slices`).
            compare_confidence: Compare confidence — level of the bootstrap interval on each difference.
            compare_max_churn: Max churn — largest share of changed top-1 answers, in [0, 1] (empty: not gated).
            compare_task: Compare task — auto, classification, segmentation, embedding or regression.
            fp16_candidate: FP16 candidate — parity also judges an FP16 conversion of the model layer by layer
                (overflow, SQNR floor) and proposes the ops to keep in FP32.
            policy: Release policy — JSON or YAML text (docs/policy.md): the required steps and the loosest
                setting each verdict may have been judged with; empty: the release gate's defaults, so a
                loosened tolerance or budget above is refused at promotion unless the policy allows it.
            stream_model: STEP model — URI of a stateful candidate's one-step ONNX model as served (state inputs
                in, next states out); empty: the candidate is served whole. The candidate then takes whole
                sequences (`eval_data` with time on axis 1), parity checks stream equals batch, the probe deploys
                STEP under Triton's sequence batcher, and STEP is registered as `<model_name>-step`.
            stream_states: STEP state pairs — `IN=OUT` (a state input and the output of its next value),
                comma-separated.
            stream_initial_state: Initial state — URI of an `.npz` keyed by state input, the state each sequence
                starts from (empty: zeros).
            drift_timestamp: Timestamp column — of the drift features: when each row was logged, not a feature
                (empty: none).
            drift_period: Drift period — `weekday`: the profile stored for the nightly check holds one profile
                per weekday of the timestamp column, and each night is judged against its own weekday's; the
                release check judges the whole reference (`none`: one profile).
            estimate_accuracy: Estimate accuracy — calibrate the candidate's scores on `eval_data` (its `labels`)
                and estimate its accuracy on `current_data` without labels; promote requires that verdict and
                stores the estimate profile with the version, which the nightly's `estimate_accuracy` needs.
            estimate_features: Estimate's model input columns — comma-separated `current_data` columns that are
                the model's input (Parquet/CSV current data; empty for `.npz`).
            estimate_max_drop: Estimate's max drop — largest drop of the estimated accuracy below the accuracy
                realised on `eval_data` (0.02 = 2 points).
        """
        # The exit handler ends the run's MLflow parent run with the outcome, however the tasks below end.
        finisher = add_finisher(pipeline="release-gate", tracking_uri=mlflow_tracking_uri, experiment=model_name,
                                resources=resources, mlflow_secret=credentials)
        with dsl.ExitHandler(finisher, name="release-gate"):
            model = dsl.importer(artifact_uri=candidate_model, artifact_class=dsl.Model, reimport=True)
            model.set_display_name("candidate-model")
            data = dsl.importer(artifact_uri=eval_data, artifact_class=dsl.Dataset, reimport=True)
            data.set_display_name("eval-data")

            export = export_op(
                model=model.output,
                example_inputs=data.output,
                tracking_uri=mlflow_tracking_uri,
                experiment=model_name,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                max_samples=max_samples,
            )
            sized(export, "export", "export")

            calibration = dsl.importer(artifact_uri=calibration_data, artifact_class=dsl.Dataset, reimport=True)
            calibration.set_display_name("calibration-data")
            calibrate = calibrate_op(
                onnx_model=export.outputs["onnx_model"],
                calibration_data=calibration.output,
                eval_data=data.output,
                max_accuracy_drop=max_accuracy_drop,
                tracking_uri=mlflow_tracking_uri,
                experiment=model_name,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
            sized(calibrate, "calibrate", "calibrate-int8")

            reference = dsl.importer(artifact_uri=reference_data, artifact_class=dsl.Dataset, reimport=True)
            reference.set_display_name("reference-data")
            current = dsl.importer(artifact_uri=current_data, artifact_class=dsl.Dataset, reimport=True)
            current.set_display_name("current-data")
            drift = drift_op(
                reference_data=reference.output,
                current_data=current.output,
                onnx_model=export.outputs["onnx_model"],
                tracking_uri=mlflow_tracking_uri,
                experiment=model_name,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                timestamp=drift_timestamp,
                period=drift_period,
            )
            sized(drift, "drift", "drift-gate")

            compare = compare_op(
                onnx_model=export.outputs["onnx_model"],
                eval_data=data.output,
                model_name=model_name,
                tracking_uri=mlflow_tracking_uri,
                alias=alias,
                task=compare_task,
                thresholds=compare_thresholds,
                confidence=compare_confidence,
                max_churn=compare_max_churn,
                pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
            )
            sized(compare, "compare", "compare-champion")

            # Evidence must come from this run: promote matches every verdict to the one its step logged in
            # this pipeline run, so a cached step (which logs nothing) would be refused. No gate is cached.
            for task in (export, calibrate, drift, compare):
                task.set_caching_options(False)

            def judge_serving_and_promote(step: Any = None, initial_state: Any = None) -> None:
                """parity, the probe and promote (with or without an estimate), for the candidate served whole
                or (`step`) step by step."""
                stream = {"states": stream_states,
                          **({"initial_state": initial_state} if initial_state is not None else {})}
                # Triton against the model is probe's fact; parity judges PyTorch vs ORT FP32, INT8 and FP16.
                parity = parity_op(
                    torch_model=model.output,
                    onnx_model=export.outputs["onnx_model"],
                    int8_model=calibrate.outputs["int8_model"],
                    eval_data=data.output,
                    fp16=fp16_candidate,
                    tracking_uri=mlflow_tracking_uri,
                    experiment=model_name,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    **({"stream_onnx": step, **stream} if step is not None else {}),
                )
                sized(parity, "parity", "parity-diff")
                # what is served: the candidate, or its STEP model under the sequence batcher
                probe = triton_probe_op(
                    onnx_model=step if step is not None else export.outputs["onnx_model"],
                    probe_inputs=data.output,
                    model_name=model_name,
                    triton_url=triton_url,
                    tracking_uri=mlflow_tracking_uri,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    **({"stream": True, **stream} if step is not None else {}),
                )
                sized(probe, "probe", "triton-probe")
                # uncached: a live server may have changed since a cached answer, and evidence is of this run
                for task in (parity, probe):
                    task.set_caching_options(False)
                with dsl.If(estimate_accuracy == True, name="estimate-accuracy"):  # noqa: E712 (a KFP condition)
                    estimate = estimate_op(
                        onnx_model=export.outputs["onnx_model"],
                        reference_data=data.output,
                        current_data=current.output,
                        features=estimate_features,
                        max_drop=estimate_max_drop,
                        tracking_uri=mlflow_tracking_uri,
                        experiment=model_name,
                        pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    )
                    sized(estimate, "estimate", "estimate-accuracy")
                    estimate.set_caching_options(False)
                    promote_on(parity, probe, step, estimate)
                with dsl.Else(name="no-estimate"):
                    promote_on(parity, probe, step)

            def promote_on(parity: Any, probe: Any, step: Any, estimate: Any = None) -> None:
                """promote on every step's evidence (and `estimate`'s, then required too), then `gate-blocked`
                when it refuses."""
                required = (*REQUIRED_STEPS, "estimate") if estimate is not None else REQUIRED_STEPS
                promote = promote_op(
                    onnx_model=export.outputs["onnx_model"],
                    int8_model=calibrate.outputs["int8_model"],
                    example_inputs=data.output,
                    export_verdict=export.outputs["verdict"],
                    export_attestation=export.outputs["attestation"],
                    drift_verdict=drift.outputs["verdict"],
                    drift_attestation=drift.outputs["attestation"],
                    probe_verdict=probe.outputs["verdict"],
                    probe_attestation=probe.outputs["attestation"],
                    parity_verdict=parity.outputs["verdict"],
                    parity_attestation=parity.outputs["attestation"],
                    calibrate_verdict=calibrate.outputs["verdict"],
                    calibrate_attestation=calibrate.outputs["attestation"],
                    compare_verdict=compare.outputs["verdict"],
                    compare_attestation=compare.outputs["attestation"],
                    trusted_public_keys=trusted_public_keys,
                    allow_unsigned=allow_unsigned,
                    model_name=model_name,
                    tracking_uri=mlflow_tracking_uri,
                    alias=alias,
                    required_steps=",".join(required),
                    allow_warn=allow_warn,
                    pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                    policy=policy,
                    **({"stream_model": step} if step is not None else {}),
                    **({"estimate_verdict": estimate.outputs["verdict"],
                        "estimate_attestation": estimate.outputs["attestation"]} if estimate is not None else {}),
                )
                sized(promote, "promote", "promote")
                promote.set_caching_options(False)

                with dsl.If(promote.outputs["Output"] != "pass", name="promotion-refused"):
                    blocked = blocked_op(verdict=promote.outputs["verdict"])
                    sized(blocked, "blocked", "gate-blocked")
                    blocked.set_caching_options(False)

            with dsl.If(stream_model == "", name="served-whole"):
                judge_serving_and_promote()
            with dsl.Elif(stream_initial_state == "", name="served-step-by-step"):
                judge_serving_and_promote(step=_imported(stream_model, dsl.Model, "step-model"))
            with dsl.Else(name="served-step-by-step-from-initial-state"):
                judge_serving_and_promote(step=_imported(stream_model, dsl.Model, "step-model"),
                                          initial_state=_imported(stream_initial_state, dsl.Dataset,
                                                                  "initial-state"))
        return finisher.output

    return one_line_descriptions(release_gate)


def _imported(uri: Any, kind: type, name: str) -> Any:
    importer = dsl.importer(artifact_uri=uri, artifact_class=kind, reimport=True)
    importer.set_display_name(name)
    return importer.output


release_gate = build_release_gate()
