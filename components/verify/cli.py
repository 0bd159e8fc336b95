"""`skewgate verify --model-name NAME --alias champion --trusted-key skewgate.pub`: exit 0 when the champion's
evidence holds, 1 when it does not, 2 when it could not be checked (registry down, no key)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from skewgate.common.cli_support import check_tracking_uri, configure_logging, exit_code, summary, write_report
from skewgate.verify.run import VerifyOptions, run

_DEFAULTS = VerifyOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate verify")
    parser.description = ("Re-check a champion from the registry alone: the registered ONNX digest, promote's "
                          "signed decision and every required step's signed verdict.")
    parser.add_argument("--model-name", required=True, help="registered model name")
    parser.add_argument("--alias", default=_DEFAULTS.alias, help=f"alias to verify (default: {_DEFAULTS.alias})")
    parser.add_argument("--trusted-key", action="append", default=[], metavar="PUB",
                        help="public key whose signatures count (repeatable; $SKEWGATE_TRUSTED_KEYS adds more)")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", ""),
                        help="MLflow tracking/registry URI (default: $MLFLOW_TRACKING_URI)")
    parser.add_argument("--report", type=Path, help="write the verdict JSON here")
    parser.add_argument("-q", "--quiet", action="store_true", help="only the first line on stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    # verify only reads: a store that is not there is a mistake in the URI, never an empty registry to judge
    tracking_uri = check_tracking_uri(args.tracking_uri, reads_only=True)
    verdict = run(model_name=args.model_name, tracking_uri=tracking_uri,
                  options=VerifyOptions(alias=args.alias, trusted_keys=tuple(args.trusted_key)))
    if args.report:
        write_report(verdict, args.report)
    text = summary(verdict)
    print(text.splitlines()[0] if args.quiet else text, file=sys.stderr)
    return exit_code(verdict)
