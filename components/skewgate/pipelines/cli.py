"""`skewgate pipeline compile|run|submit|schedule`: compile the pipelines to the YAML users upload in the KFP UI,
run them locally with kfp.local, submit one to a KFP API server, or upload the release gate and a nightly drift
pipeline (one task, or fanned out over shards for a big snapshot) and schedule the nightly drift.

Pipeline arguments are `--param NAME=VALUE`; for `run --local`, a VALUE that names an existing file becomes its
absolute path (kfp.local reads artifacts from local paths)."""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

from skewgate import __version__

PIPELINES = {
    "release-gate": "skewgate.pipelines.release_gate:release_gate",
    "nightly-drift": "skewgate.pipelines.nightly_drift:nightly_drift",
    "nightly-drift-fanout": "skewgate.pipelines.nightly_drift:nightly_drift_fanout",
}
NIGHTLY_PIPELINES = ("nightly-drift", "nightly-drift-fanout")  # what `schedule` can run every night
FINISHED_PIPELINES = ("release-gate", "nightly-drift")  # what `finish` knows (the fan-out finishes as nightly-drift)
# kfp.local cannot resolve every placeholder a cluster resolves: these variants run locally instead.
LOCAL_VARIANTS = {"nightly-drift": "skewgate.pipelines.nightly_drift:nightly_drift_local",
                  "nightly-drift-fanout": "skewgate.pipelines.nightly_drift:nightly_drift_fanout_local"}
UNSIGNED_WARNING = (
    "skewgate pipeline {action}: warning: no signing Secret (--signing-secret NAME or $SKEWGATE_SIGNING_SECRET): "
    "the steps will not sign their verdicts, so promote refuses every promotion on the cluster (unless a run "
    "sets allow_unsigned, which no production run should). Create a Secret with key skewgate.key "
    "(skewgate keys generate) and compile with --signing-secret NAME.")


def load_pipeline(name: str, *, local: bool = False) -> Any:
    module, _, attr = (LOCAL_VARIANTS.get(name, PIPELINES[name]) if local else PIPELINES[name]).partition(":")
    return getattr(importlib.import_module(module), attr)


def build_pipeline(name: str, *, resources_file: Path | None, variant: str, signing_secret: str | None = None,
                   mlflow_secret: str | None = None) -> Any:
    """The pipeline built with these resources and Secrets (`compile`); the nightly drift pipelines have no GPU
    step and sign nothing that promote reads."""
    if name == "release-gate":
        from skewgate.pipelines.release_gate import build_release_gate

        return build_release_gate(resources_file=resources_file, variant="gpu" if variant == "gpu" else "cpu",
                                  signing_secret_name=signing_secret, mlflow_secret_name=mlflow_secret)
    if variant == "gpu":
        from skewgate.common.errors import InputError

        raise InputError("--variant", expected="cpu for the nightly drift pipelines (they have no GPU step)",
                         found=variant)
    from kfp import dsl

    from skewgate.pipelines.nightly_drift import build_nightly_drift, build_nightly_drift_fanout

    build = build_nightly_drift_fanout if name == "nightly-drift-fanout" else build_nightly_drift
    return build(run_date=dsl.PIPELINE_JOB_SCHEDULE_TIME_UTC_PLACEHOLDER, resources_file=resources_file,
                 mlflow_secret_name=mlflow_secret)


def warn_if_unsigned(name: str, signing_secret: str | None, *, action: str = "compile") -> None:
    """The release gate compiled without a signing Secret: every promotion on the cluster will be refused."""
    from skewgate.pipelines.signing import signing_secret as resolve

    if name == "release-gate" and not resolve(signing_secret):
        print(UNSIGNED_WARNING.format(action=action), file=sys.stderr)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """`skewgate pipeline compile | run | submit | schedule | finish`: one option per line, each with its help, so
    long (a table, not logic)."""
    parser = parser or argparse.ArgumentParser(prog="skewgate pipeline")
    from skewgate.common.cli_support import describe

    pipeline_help = "which pipeline (default: %(default)s)"
    describe(parser, __doc__, example="""
        skewgate pipeline compile --pipeline release-gate --out release_gate.yaml
        skewgate pipeline run --local --pipeline nightly-drift --param serving_snapshot=serving.npz \\
            --param model_name=digits-cnn --param mlflow_tracking_uri=sqlite:///$PWD/mlflow.db
    """)
    sub = parser.add_subparsers(dest="action", required=True, help="what to do")

    compile_ = sub.add_parser("compile", help="write the pipeline YAML for the KFP UI")
    describe(compile_, "Compile a pipeline to the YAML users upload in the KFP UI. Its steps run in the image "
             "$SKEWGATE_IMAGE (a name the cluster can pull, e.g. registry.example.com/ml/skewgate:0.1.0; default "
             "skewgate:0.1.0, what `make images` builds locally), pinned to $SKEWGATE_IMAGE_DIGEST (sha256:…) when "
             "set; the GPU variant's steps in $SKEWGATE_GPU_IMAGE.", example="""
        skewgate pipeline compile --pipeline release-gate --resources resources.json --out release_gate.yaml \\
            --signing-secret skewgate-signing-key --mlflow-secret mlflow-credentials
    """)
    compile_.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate", help=pipeline_help)
    compile_.add_argument("--out", type=Path, required=True, help="YAML file to write")
    compile_.add_argument("--resources", type=Path, metavar="FILE",
                          help="JSON of per-step CPU/memory/accelerator overrides, e.g. "
                               "'{\"parity\": {\"memory_limit\": \"8Gi\"}}' (default: $SKEWGATE_RESOURCES)")
    compile_.add_argument("--variant", choices=["cpu", "gpu"], default="cpu",
                          help="gpu: calibrate, parity and the probe take a GPU and $SKEWGATE_GPU_IMAGE "
                               "(release gate only)")
    compile_.add_argument("--signing-secret", metavar="NAME",
                          help="Kubernetes Secret (key skewgate.key) mounted into every signing step of the "
                               "release gate (default: $SKEWGATE_SIGNING_SECRET; empty: none, and promote will "
                               "refuse every promotion)")
    compile_.add_argument("--mlflow-secret", metavar="NAME",
                          help="Kubernetes Secret (keys username, password) whose values every step that talks "
                               "to MLflow gets as MLFLOW_TRACKING_USERNAME/PASSWORD (default: "
                               "$SKEWGATE_MLFLOW_SECRET; empty: none)")

    run = sub.add_parser("run", help="run a pipeline locally (kfp.local, no cluster)")
    describe(run, "Run a pipeline locally with kfp.local, no cluster; a --param VALUE naming an existing file "
                  "becomes its absolute path.", example="""
        skewgate pipeline run --local --pipeline nightly-drift --param serving_snapshot=serving.npz \\
            --param model_name=digits-cnn --param mlflow_tracking_uri=sqlite:///$PWD/mlflow.db
    """)
    run.add_argument("--local", action="store_true", required=True, help="run with kfp.local (required)")
    run.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate", help=pipeline_help)
    run.add_argument("--pipeline-root", type=Path, default=Path("work/kfp"), help="default: work/kfp")
    run.add_argument("--runner", choices=["subprocess", "docker"], default="subprocess",
                     help="subprocess: steps in this Python; docker: steps in the component image (host network)")
    run.add_argument("--verbose", action="store_true",
                     help="stream every task's log here instead of into PIPELINE_ROOT/kfp.log")

    submit = sub.add_parser("submit", help="submit a run to a KFP API server (kfp.Client)")
    describe(submit, "Submit a run of a pipeline to a KFP API server (kfp.Client); prints the run id.", example="""
        skewgate pipeline submit --host https://kubeflow.example.com/pipeline \\
            --param candidate_model=s3://models/candidate.pt2 --param eval_data=s3://data/examples.npz \\
            --param calibration_data=s3://data/calibration.npz \\
            --param reference_data=s3://data/train.parquet --param current_data=s3://data/validation.parquet \\
            --param model_name=digits-cnn --param mlflow_tracking_uri=https://mlflow.example.com
    """)
    submit.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kubeflow.example/pipeline")
    finish = sub.add_parser("finish", help="end a pipeline run's MLflow parent run with its outcome (what the "
                                           "pipelines' exit handler does; for steps run as CLIs under one "
                                           "--pipeline-run-id)")
    describe(finish, "End a pipeline run's MLflow parent run with its outcome, as the pipelines' exit handler does: "
                     "for steps run as CLIs under one --pipeline-run-id. Exit 0 when the outcome is a success "
                     "(promoted, no drift), 1 when not.", example="""
        skewgate pipeline finish --pipeline-run-id gate-42 --experiment digits-cnn \\
            --tracking-uri sqlite:///mlflow.db
    """)
    finish.add_argument("--pipeline", choices=FINISHED_PIPELINES, default="release-gate",
                        help="which pipeline (default: %(default)s; the fan-out nightly finishes as nightly-drift)")
    finish.add_argument("--pipeline-run-id", required=True, help="the id the steps were run with")
    finish.add_argument("--experiment", required=True, help="MLflow experiment (the registered model's name)")
    finish.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", ""),
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI)")
    schedule = sub.add_parser("schedule", help="upload the release gate and a nightly drift pipeline and create "
                                               "the nightly drift recurring run")
    describe(schedule, "Upload the release gate and a nightly drift pipeline (--pipeline) and create the nightly "
                       "drift recurring run; prints its id. The Secrets come from $SKEWGATE_SIGNING_SECRET and "
                       "$SKEWGATE_MLFLOW_SECRET, as for compile.",
             example="""
        skewgate pipeline schedule --host https://kubeflow.example.com/pipeline --cron '0 0 2 * * *' \\
            --param serving_snapshot=s3://serving-logs/digits/latest.parquet --param model_name=digits-cnn \\
            --param mlflow_tracking_uri=https://mlflow.example.com
        skewgate pipeline schedule --host https://kubeflow.example.com/pipeline --pipeline nightly-drift-fanout \\
            --param serving_snapshot=s3://serving-logs/digits/2026-12-03/ --param model_name=digits-cnn \\
            --param mlflow_tracking_uri=https://mlflow.example.com
    """)
    schedule.add_argument("--pipeline", choices=NIGHTLY_PIPELINES, default="nightly-drift",
                          help="the nightly drift pipeline the recurring run runs: one task, or fanned out over "
                               "shards for a snapshot too big for one pod (default: %(default)s)")
    schedule.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kubeflow.example/pipeline")
    schedule.add_argument("--cron", default="0 0 2 * * *",
                          help="six fields, seconds first (default: '0 0 2 * * *', 02:00 daily)")
    schedule.add_argument("--experiment", default="skewgate",
                          help="KFP experiment of the recurring run (default: %(default)s)")
    schedule.add_argument("--namespace", help="KFP namespace (multi-user installations)")
    schedule.add_argument("--version", default=__version__, help="pipeline version name prefix")
    schedule.add_argument("--no-recurring-run", action="store_true", help="upload the pipelines only")
    schedule.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                          help="nightly drift argument (serving_snapshot, model_name, mlflow_tracking_uri, alias)")
    submit.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate", help=pipeline_help)
    submit.add_argument("--experiment", default="skewgate", help="KFP experiment of the run (default: %(default)s)")
    for action in (run, submit):
        action.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                            help="pipeline argument (repeatable), e.g. model_name=digits-cnn")
    return parser


def _params(items: list[str], *, local: bool) -> dict[str, str]:
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"skewgate pipeline: --param {item!r}: expected NAME=VALUE")
        params[name] = str(Path(value).resolve()) if local and Path(value).is_file() else value
    if "mlflow_tracking_uri" not in params and os.environ.get("MLFLOW_TRACKING_URI"):
        params["mlflow_tracking_uri"] = os.environ["MLFLOW_TRACKING_URI"]
    return params


def whole_integer_defaults(spec: str) -> str:
    """`spec` (a compiled pipeline) with its header's integer defaults written as integers: KFP writes every
    number as a float there (`max_samples: int [Default: 64.0]`), which reads as if fractions were allowed. Only
    the leading comment changes; the spec's `defaultValue` is a protobuf number either way."""
    lines = spec.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if not line.startswith("#"):
            break
        lines[i] = re.sub(r"^(#\s+\w+: int \[Default: -?\d+)\.0\]", r"\1]", line)
    return "".join(lines)


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    from skewgate.common.cli_support import configure_logging

    configure_logging()
    if args.action == "compile":
        from kfp import compiler

        from skewgate.common.errors import InputError

        try:
            pipeline = build_pipeline(args.pipeline, resources_file=args.resources, variant=args.variant,
                                      signing_secret=args.signing_secret, mlflow_secret=args.mlflow_secret)
        except InputError as err:
            print(f"skewgate pipeline compile: {err}", file=sys.stderr)
            return 2
        args.out.parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(pipeline, str(args.out))
        args.out.write_text(whole_integer_defaults(args.out.read_text()))
        warn_if_unsigned(args.pipeline, args.signing_secret)
        print(f"wrote {args.out}", file=sys.stderr)
        return 0
    if args.action == "finish":
        return _finish(args)
    if args.action == "run":
        pipeline = load_pipeline(args.pipeline, local=True)
        from skewgate.pipelines.local import run_locally, run_verdicts, verdict_table

        # kfp.local streams every task's log (about 1,500 lines a release gate): to a file, unless --verbose
        log_file = None if args.verbose else args.pipeline_root / "kfp.log"
        try:
            result = run_locally(pipeline, _params(args.param, local=True), pipeline_root=args.pipeline_root,
                                 runner=args.runner, log_file=log_file)
        except TypeError as err:  # a missing or unknown pipeline argument
            print(f"skewgate pipeline run: {err}", file=sys.stderr)
            return 2
        print(f"{args.pipeline}: run {'succeeded' if result.succeeded else 'FAILED'}\n"
              f"{verdict_table(run_verdicts(args.pipeline_root.resolve(), result.started_ms))}"
              + (f"\ntask logs: {log_file}" if log_file else ""), file=sys.stderr)
        return 0 if result.succeeded else 1
    pipeline = load_pipeline(args.pipeline) if args.action != "schedule" else None
    from skewgate.common.cli_support import EXIT_ERROR
    from skewgate.common.errors import SkewgateError, map_errors

    try:
        if args.action == "schedule":
            from skewgate.pipelines.schedule import Schedule, check_cron, schedule

            plan = Schedule(cron=check_cron(args.cron), params=_params(args.param, local=False),
                            experiment=args.experiment, namespace=args.namespace, version=args.version,
                            recurring=not args.no_recurring_run, nightly=args.pipeline)
            warn_if_unsigned("release-gate", None, action="schedule")
            run_id = schedule(_client(args.host), plan,
                              pipelines={name: load_pipeline(name) for name in ("release-gate", args.pipeline)})
            print(run_id or "uploaded; no recurring run")
            return 0
        client = _client(args.host)
        with map_errors(f"KFP API at {args.host}", "submit a run"):
            run = client.create_run_from_pipeline_func(pipeline, arguments=_params(args.param, local=False),
                                                       experiment_name=args.experiment)
    except SkewgateError as err:
        print(f"skewgate pipeline {args.action}: {err}", file=sys.stderr)
        return EXIT_ERROR
    print(run.run_id)
    return 0


def _finish(args: argparse.Namespace) -> int:
    """Exit 0 when the run's outcome is a success (promoted / no drift), 1 when not, 2 when MLflow failed."""
    from skewgate.common import mlflow_log
    from skewgate.common.errors import SkewgateError

    if not args.tracking_uri:
        print("skewgate pipeline finish: --tracking-uri: expected an MLflow tracking URI, found none",
              file=sys.stderr)
        return 2
    try:
        tracking = mlflow_log.connect(args.tracking_uri, experiment=args.experiment)
        outcome = mlflow_log.finish_pipeline_run(tracking, args.pipeline_run_id, pipeline=args.pipeline)
    except SkewgateError as err:
        print(f"skewgate pipeline finish: {err}", file=sys.stderr)
        return 2
    print(f"{outcome.label}: {outcome.reason}")
    return 0 if outcome.succeeded else 1


def _client(host: str) -> Any:
    """A KFP client; inside a cluster with a projected service-account token (the chart mounts one at
    $KF_PIPELINES_SA_TOKEN_PATH), authenticated with it. kfp.Client checks the API's health on construction, so
    a server that cannot be reached is `Unreachable` here."""
    import kfp
    from kfp.client import ServiceAccountTokenVolumeCredentials

    from skewgate.common.errors import map_errors

    token_path = os.environ.get("KF_PIPELINES_SA_TOKEN_PATH")
    credentials = ServiceAccountTokenVolumeCredentials(path=token_path) if token_path else None
    with map_errors(f"KFP API at {host}", "connect"):
        return kfp.Client(host=host, credentials=credentials)
