"""`skewgate pipeline compile|run|submit`: compile the pipelines to the YAML users upload in the KFP UI, run
them locally with kfp.local, or submit them to a KFP API server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

PIPELINES = {"release-gate": "skewgate.pipelines.release_gate:release_gate"}


def _load(name: str) -> Any:
    import importlib

    module, _, attr = PIPELINES[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate pipeline")
    parser.description = __doc__
    sub = parser.add_subparsers(dest="action", required=True)

    compile_ = sub.add_parser("compile", help="write the pipeline YAML for the KFP UI")
    compile_.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate")
    compile_.add_argument("--out", type=Path, required=True, help="YAML file to write")

    run = sub.add_parser("run", help="run the release gate locally (kfp.local, no cluster)")
    run.add_argument("--local", action="store_true", required=True, help="run with kfp.local (required)")
    run.add_argument("--candidate-model", type=Path, required=True, help=".pt2 of the candidate")
    run.add_argument("--eval-data", type=Path, required=True, help=".npz of example inputs")
    run.add_argument("--model-name", required=True, help="registered model name (and MLflow experiment)")
    run.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", ""),
                     help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI)")
    run.add_argument("--alias", default="champion")
    run.add_argument("--allow-warn", action="store_true")
    run.add_argument("--pipeline-root", type=Path, default=Path("work/kfp"), help="default: work/kfp")

    submit = sub.add_parser("submit", help="submit a run to a KFP API server (kfp.Client)")
    submit.add_argument("--host", required=True, help="KFP API endpoint, for example https://kubeflow.example/pipeline")
    submit.add_argument("--pipeline", choices=sorted(PIPELINES), default="release-gate")
    submit.add_argument("--experiment", default="skewgate")
    submit.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                        help="pipeline argument (repeatable), for example model_name=digits-cnn")
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    from skewgate.common.cli_support import configure_logging

    configure_logging()
    if args.action == "compile":
        from kfp import compiler

        args.out.parent.mkdir(parents=True, exist_ok=True)
        compiler.Compiler().compile(_load(args.pipeline), str(args.out))
        print(f"wrote {args.out}", file=sys.stderr)
        return 0
    if args.action == "run":
        return _run_local(args)
    return _submit(args)


def _run_local(args: argparse.Namespace) -> int:
    from skewgate.pipelines.local import run_release_gate_locally

    if not args.tracking_uri:
        print("skewgate pipeline run: --tracking-uri (or MLFLOW_TRACKING_URI) is required: promote needs a "
              "registry", file=sys.stderr)
        return 2
    for path in (args.candidate_model, args.eval_data):
        if not path.is_file():
            print(f"skewgate pipeline run: {path}: no such file", file=sys.stderr)
            return 2
    result = run_release_gate_locally(candidate_model=args.candidate_model, eval_data=args.eval_data,
                                      model_name=args.model_name, tracking_uri=args.tracking_uri,
                                      pipeline_root=args.pipeline_root, alias=args.alias,
                                      allow_warn=args.allow_warn)
    print(f"release gate: {'succeeded' if result.succeeded else 'FAILED (blocked or errored)'}", file=sys.stderr)
    return 0 if result.succeeded else 1


def _submit(args: argparse.Namespace) -> int:
    import kfp

    params = dict(item.split("=", 1) for item in args.param)
    client = kfp.Client(host=args.host)
    run = client.create_run_from_pipeline_func(_load(args.pipeline), arguments=params,
                                               experiment_name=args.experiment)
    print(run.run_id)
    return 0
