"""KFP components for the drift gate (release gate) and the nightly drift check against the champion."""

from kfp import dsl

from skewgate.images import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_op(
    reference_data: dsl.Input[dsl.Dataset],
    current_data: dsl.Input[dsl.Dataset],
    onnx_model: dsl.Input[dsl.Model],
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    html_report: dsl.Output[dsl.HTML],
    heatmap: dsl.Output[dsl.Artifact],
    profile: dsl.Output[dsl.Artifact],
    tracking_uri: str = "",
    experiment: str = "skewgate",
    pipeline_run_id: str = "",
    seed: int = 0,
) -> str:
    """Drift of `current_data` against `reference_data`; also writes the reference profile for the registry."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.drift.core import DriftOptions
    from skewgate.drift.pipeline_support import run_drift

    result = evaluate_and_record(
        "drift",
        lambda run: run_drift(run, reference=reference_data.path, current=current_data.path, model=onnx_model.path,
                              options=DriftOptions(seed=seed), heatmap=heatmap.path, html=html_report.path,
                              profile_out=profile.path),
        TrackingOptions(uri=tracking_uri, experiment=experiment, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def nightly_drift_op(
    serving_snapshot: dsl.Input[dsl.Dataset],
    model_name: str,
    tracking_uri: str,
    verdict: dsl.Output[dsl.Artifact],
    metrics: dsl.Output[dsl.Metrics],
    report: dsl.Output[dsl.Markdown],
    html_report: dsl.Output[dsl.HTML],
    heatmap: dsl.Output[dsl.Artifact],
    alias: str = "champion",
    run_date: str = "",
    pipeline_run_id: str = "",
    pushgateway_url: str = "",
) -> str:
    """Drift of a serving-log snapshot against the profile stored with the `alias` version; tags that version;
    pushes the figures to `pushgateway_url` when set."""
    from skewgate.common.kfp_io import finish
    from skewgate.common.recording import TrackingOptions, evaluate_and_record
    from skewgate.drift.pipeline_support import run_nightly

    result = evaluate_and_record(
        "nightly-drift",
        lambda run: run_nightly(run, model_name=model_name, alias=alias, current=serving_snapshot.path,
                                run_date=run_date, heatmap=heatmap.path, html=html_report.path,
                                pushgateway=pushgateway_url),
        TrackingOptions(uri=tracking_uri, experiment=model_name, pipeline_run_id=pipeline_run_id),
    )
    return finish(result, verdict_artifact=verdict, metrics=metrics, report=report)


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def drift_blocked(verdict: dsl.Input[dsl.Artifact]) -> None:
    """Fails the nightly run on a drift `fail`, so that alerting sees it."""
    from skewgate.common.verdict import Verdict

    raise RuntimeError(f"drift detected: {Verdict.read(verdict.path).message}")
