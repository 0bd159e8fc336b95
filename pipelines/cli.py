"""`skewgate pipeline compile|run|submit`: compile the pipelines to the YAML users upload in the KFP UI, run
them locally with kfp.local, or submit them to a KFP API server.

Pipeline arguments are `--param NAME=VALUE`; for `run --local`, a VALUE that names an existing file becomes its
absolute path (kfp.local reads artifacts from local paths)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from typing import Any

PIPELINES = {
    "release-gate": "skewgate.pipelines.release_gate:release_gate",
    "nightly-drift": "skewgate.pipelines.nightly_drift:nightly_drift",
}
# kfp.local cannot resolve every placeholder a cluster resolves: these variants run locally instead.
LOCAL_VARIANTS = {"nightly-drift": "skewgate.pipelines.nightly_drift:nightly_drift_local"}


def load_pipeline(name: str, *, local: bool = False) -> Any:
    module, _, attr = (LOCAL_VARIANTS.get(name, PIPELINES[name]) if local else PIPELINES[name]).partition(":")
    return getattr(importlib.import_module(module), attr)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate pipeline")
    parser.description = __doc__
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", required=True)

    compile_ = sub.add_parser("compile", help="write the pipeline YAML for the KFP UI")
    compile_.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate")
    compile_.add_argument("--out", type=Path, required=True, help="YAML file to write")

    run = sub.add_parser("run", help="run a pipeline locally (kfp.local, no cluster)")
    run.add_argument("--local", action="store_true", required=True, help="run with kfp.local (required)")
    run.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate")
    run.add_argument("--pipeline-root", type=Path, default=Path("work/kfp"), help="default: work/kfp")

    submit = sub.add_parser("submit", help="submit a run to a KFP API server (kfp.Client)")
    submit.add_argument("--host", required=True, help="KFP API endpoint, e.g. https://kubeflow.example/pipeline")
    submit.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate")
    submit.add_argument("--experiment", default="skewgate")
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


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    from skewgate.common.cli_support import configure_logging

    configure_logging()
    pipeline = load_pipeline(args.pipeline, local=args.action == "run")
    if args.action == "compile":
        from kfp import compiler

        args.out.parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(pipeline, str(args.out))
        print(f"wrote {args.out}", file=sys.stderr)
        return 0
    if args.action == "run":
        from skewgate.pipelines.local import run_locally

        try:
            result = run_locally(pipeline, _params(args.param, local=True), pipeline_root=args.pipeline_root)
        except TypeError as err:  # a missing or unknown pipeline argument
            print(f"skewgate pipeline run: {err}", file=sys.stderr)
            return 2
        print(f"{args.pipeline}: {'succeeded' if result.succeeded else 'FAILED'} (output: {result.output})",
              file=sys.stderr)
        return 0 if result.succeeded else 1
    import kfp

    client = kfp.Client(host=args.host)
    run = client.create_run_from_pipeline_func(pipeline, arguments=_params(args.param, local=False),
                                               experiment_name=args.experiment)
    print(run.run_id)
    return 0
