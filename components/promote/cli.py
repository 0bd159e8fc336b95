"""`skewgate promote --model-name NAME --onnx model.onnx --verdicts DIR --alias champion`."""

from __future__ import annotations

import argparse
from pathlib import Path

from skewgate.common.cli_support import add_common_args, run_step
from skewgate.common.errors import InputError
from skewgate.common.verdict import Verdict
from skewgate.promote.core import DEFAULT_REQUIRED


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate promote")
    parser.description = ("Move a registry alias to the ONNX model only if every required verdict passed for "
                          "this exact file (SHA-256). Refusals tag the version with the reason.")
    parser.add_argument("--model-name", required=True, help="registered model name")
    parser.add_argument("--onnx", required=True, type=Path, help="the ONNX file to promote")
    parser.add_argument("--verdicts", required=True, type=Path, help="directory of verdict JSON files")
    parser.add_argument("--alias", default="champion", help="alias to set (default: champion)")
    parser.add_argument("--require", default=",".join(DEFAULT_REQUIRED),
                        help=f"comma-separated steps that must pass (default: {','.join(DEFAULT_REQUIRED)})")
    parser.add_argument("--allow-warn", action="store_true", help="accept `warn` verdicts as passing")
    parser.add_argument("--version", help="promote this existing model version instead of registering")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)

    def evaluate(run: object) -> Verdict:
        from skewgate.common.mlflow_log import MlflowRegistry, StepRun
        from skewgate.promote.core import promote

        if not isinstance(run, StepRun):
            raise InputError("--tracking-uri", expected="an MLflow tracking URI (promotion needs a registry)",
                             found="none (set --tracking-uri or MLFLOW_TRACKING_URI)")
        required = [s.strip() for s in args.require.split(",") if s.strip()]
        return promote(model_name=args.model_name, onnx=args.onnx, verdicts_dir=args.verdicts,
                       registry=MlflowRegistry(run), alias=args.alias, required=required,
                       allow_warn=args.allow_warn, version=args.version)

    return run_step("promote", args, evaluate)
