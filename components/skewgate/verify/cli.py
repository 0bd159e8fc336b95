"""`skewgate verify --model-name NAME --alias champion --trusted-key skewgate.pub`: exit 0 when the champion's
evidence holds, 1 when it does not, 2 when it could not be checked (registry down, no key)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from skewgate.common.cli_support import check_tracking_uri, configure_logging, describe, finish_cli
from skewgate.common.recording import TrackingOptions
from skewgate.common.steps import resolve_steps, split_steps
from skewgate.verify.run import VerifyOptions, run

_DEFAULTS, _TRACKING = VerifyOptions(), TrackingOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate verify")
    describe(parser, "Re-check a champion from the registry alone: the file its MLmodel loads has the gated "
                     "digest, promote's signed decision names this model, version and alias under a policy that "
                     "required at least --require, and every required step's signed verdict holds.",
             example="""
                 skewgate verify --model-name digits-cnn --alias champion --trusted-key keys/skewgate.pub \\
                     --tracking-uri sqlite:///mlflow.db
             """)
    parser.add_argument("--model-name", required=True, help="registered model name")
    parser.add_argument("--alias", default=_DEFAULTS.alias, help=f"alias to verify (default: {_DEFAULTS.alias})")
    parser.add_argument("--trusted-key", action="append", default=[], metavar="PUB",
                        help="public key whose signatures count (repeatable; $SKEWGATE_TRUSTED_KEYS adds more)")
    required = ",".join(_DEFAULTS.required)
    parser.add_argument("--require", default=required,
                        help="comma-separated steps promote's signed decision must have required, at least; the "
                             f"pipeline's task names stand for their steps (default: {required})")
    parser.add_argument("--policy", type=Path, metavar="FILE",
                        help="policy file (JSON or YAML): the required steps and the loosest setting each stored "
                             "verdict may have been judged with; its `required` wins over --require (default: the "
                             "release gate's defaults, see docs/policy.md)")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", ""),
                        help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI)")
    parser.add_argument("--mlflow-deadline", type=float, default=_TRACKING.deadline_s, metavar="SECONDS",
                        help=f"give up on an unreachable registry after this long (default: "
                             f"{_TRACKING.deadline_s:g})")
    parser.add_argument("--report", type=Path, help="write the verdict JSON here")
    parser.add_argument("-q", "--quiet", action="store_true", help="only the first line on stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    # verify only reads: a store that is not there is a mistake in the URI, never an empty registry to judge
    tracking = TrackingOptions(uri=check_tracking_uri(args.tracking_uri),
                               deadline_s=args.mlflow_deadline)
    options = VerifyOptions(alias=args.alias, trusted_keys=tuple(args.trusted_key),
                            required=resolve_steps(split_steps(args.require), source="--require"),
                            policy=str(args.policy or ""))
    result = run(model_name=args.model_name, options=options, tracking=tracking)
    return finish_cli(result, args)
