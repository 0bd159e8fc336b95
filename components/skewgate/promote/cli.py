"""`skewgate promote --model-name NAME --onnx model.onnx --verdicts DIR --trusted-key skewgate.pub`."""

from __future__ import annotations

import argparse
from pathlib import Path

from skewgate.common.cli_support import add_common_args, describe, finish_cli, tracking_options
from skewgate.common.interrupts import deferred_interrupts
from skewgate.common.policy import load_policy
from skewgate.promote.core import INT8_SUFFIX, STEP_SUFFIX, validate_target
from skewgate.promote.run import STEPS, TASK_NAMES, PromoteOptions, resolve_steps, run, split_steps

_DEFAULTS = PromoteOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate promote")
    describe(parser, "Move a registry alias to the ONNX model only if every required verdict passed for this "
                     "exact file (SHA-256) and is signed by a trusted key. Refusals tag the version with the reason.",
             example="""
                 skewgate promote --model-name digits-cnn --onnx model.onnx --verdicts verdicts/ \\
                     --trusted-key keys/skewgate.pub --report promote.json
             """)
    parser.add_argument("--model-name", required=True, help="registered model name")
    parser.add_argument("--onnx", required=True, type=Path, help="the ONNX file to promote")
    parser.add_argument("--verdicts", required=True, type=Path,
                        help="directory of verdict JSON files, each with its <stem>.intoto.jsonl envelope")
    parser.add_argument("--alias", default=_DEFAULTS.alias, help=f"alias to set (default: {_DEFAULTS.alias})")
    required = ",".join(_DEFAULTS.required)
    parser.add_argument("--require", default=required,
                        help=f"comma-separated steps that must pass, of {', '.join(STEPS)}; the pipeline's task "
                             f"names ({', '.join(TASK_NAMES)}) stand for their steps (default: {required})")
    parser.add_argument("--allow-warn", action="store_true", help="accept `warn` verdicts as passing")
    parser.add_argument("--policy", type=Path, metavar="FILE",
                        help="policy file (JSON or YAML): the required steps and the loosest setting each verdict "
                             "may have been judged with; its `required` and `allow_warn` win over the flags "
                             "(default: the release gate's defaults, see docs/policy.md)")
    parser.add_argument("--trusted-key", action="append", default=[], metavar="PUB",
                        help="public key whose signatures count (repeatable; $SKEWGATE_TRUSTED_KEYS adds more)")
    parser.add_argument("--allow-unsigned", action="store_true",
                        help="accept unsigned verdicts (local experiments only: anyone could have written them)")
    parser.add_argument("--version", help="promote this existing model version instead of registering")
    parser.add_argument("--int8", type=Path,
                        help="calibrate's INT8 model: registered beside as NAME-int8 when calibrate and parity "
                             "judged exactly this file")
    parser.add_argument("--stream-onnx", type=Path, metavar="STEP",
                        help="a stateful model's STEP model, served step by step: the probe's verdict must be about it "
                             "and hold its stateful checks, parity's must hold its stream checks on it; registered "
                             "beside as NAME-step")
    parser.add_argument("--example-inputs", type=Path,
                        help=".npz whose first rows become the registered MLflow model's input example")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    # Setup mistakes (a tracking URI MLflow would misread, an unknown step, a model name or alias MLflow rejects)
    # raise here, before MLflow or the registry is touched: `skewgate` reports them in one line and exits 2.
    tracking = tracking_options(args)
    required = resolve_steps(split_steps(args.require), source="--require")
    validate_target(args.model_name, args.alias)
    for suffix, companion in ((INT8_SUFFIX, args.int8), (STEP_SUFFIX, args.stream_onnx)):
        if companion is not None:
            validate_target(f"{args.model_name}{suffix}", args.alias)
    if args.policy is not None:
        load_policy(args.policy)  # a malformed policy is a setup mistake: exit 2, nothing touched
    options = PromoteOptions(alias=args.alias, required=required, allow_warn=args.allow_warn,
                             trusted_keys=tuple(args.trusted_key), allow_unsigned=args.allow_unsigned,
                             version=args.version, policy=str(args.policy or ""))
    # Once it starts, a promotion ends as its log records it: an interrupt waits for the registry writes, the step
    # run and the report (each bounded by --mlflow-deadline), then exits 130/143 (`skewgate`'s main).
    with deferred_interrupts("the promotion (registry writes, its log, the report)"):
        result = run(model_name=args.model_name, onnx=args.onnx, verdicts_dir=args.verdicts, options=options,
                     tracking=tracking, int8=args.int8, step=args.stream_onnx,
                     example_inputs=args.example_inputs)
        return finish_cli(result, args)
