"""The exit handler of both pipelines: end the run's MLflow parent run with the outcome.

It runs however the pipeline ended (promoted, blocked, a step errored or was never scheduled), so no parent run is
left RUNNING. An exit task may not read outputs of the tasks it guards, so it reads the verdicts the steps logged
to MLflow (`mlflow_log.finish_pipeline_run`) and KFP's final status of the guarded tasks.
"""

from typing import Any

from kfp import dsl

from skewgate.common.images import IMAGE
from skewgate.pipelines.credentials import mount_mlflow_credentials
from skewgate.pipelines.resources import apply


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def finish_run_op(
    final_status: dsl.PipelineTaskFinalStatus,
    pipeline: str,
    tracking_uri: str,
    experiment: str,
    pipeline_run_id: str,
) -> str:
    """End the MLflow parent run: FINISHED when the candidate was promoted (nightly: no drift), FAILED when it
    was blocked or a step errored; returns the outcome (`promoted`, `blocked`, `pass`, `drift`, `error`).

    Args:
        final_status: KFP's final status of the tasks the exit handler guards.
        pipeline: Which pipeline ended (release-gate or nightly-drift).
        tracking_uri: MLflow tracking URI of the run's parent run.
        experiment: MLflow experiment of the parent run (the registered model's name).
        pipeline_run_id: KFP pipeline run id whose MLflow parent run ends.
    """
    from skewgate.common import mlflow_log

    tracking = mlflow_log.connect(tracking_uri, experiment=experiment)
    outcome = mlflow_log.finish_pipeline_run(tracking, pipeline_run_id, pipeline=pipeline,
                                             final_state=final_status.state,
                                             final_error=final_status.error_message or "")
    print(f"{pipeline} {pipeline_run_id}: {outcome.label} ({outcome.reason})")
    return outcome.label


def add_finisher(*, pipeline: str, tracking_uri: str, experiment: str, resources: Any = None,
                 mlflow_secret: str = "") -> dsl.PipelineTask:
    """The exit task, uncached (its answer is about this run) and labelled for the KFP UI, with the MLflow
    credentials of the Secret `mlflow_secret` (empty: none); use it as
    `with dsl.ExitHandler(add_finisher(...)):` around the pipeline's tasks."""
    task = finish_run_op(pipeline=pipeline, tracking_uri=tracking_uri, experiment=experiment,
                         pipeline_run_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER)
    task.set_display_name("finish-mlflow-run")
    task.set_caching_options(False)
    if resources is not None:
        apply(task, "finish", resources)
    mount_mlflow_credentials(task, "finish", mlflow_secret)
    return task
