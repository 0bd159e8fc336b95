"""`skewgate preprocess --train module:fn --serve module:fn --raw RAW.npz [--array NAME] --report r.json`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skewgate.common.cli_support import add_common_args, describe, finish_cli, tracking_options
from skewgate.preprocess.run import PreprocessOptions, run


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate preprocess")
    describe(parser, "Run the training and the serving preprocessing on the same raw samples: outputs must match, "
                     "and each must be deterministic (no augmentation left on at inference).",
             example="""
                 skewgate preprocess --train mypkg.prep:train --serve mypkg.prep:serve --raw raw.npz \\
                     --report preprocess.json
             """)
    parser.add_argument("--train", required=True, help="module:function used in training")
    parser.add_argument("--serve", required=True, help="module:function used in serving")
    parser.add_argument("--raw", required=True, type=Path, help=".npz of raw samples")
    parser.add_argument("--array", help="which array of the .npz (default: the first)")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(sys.argv[1:] if argv is None else argv)
    result = run(train=args.train, serve=args.serve, raw=args.raw, options=PreprocessOptions(array=args.array),
                  tracking=tracking_options(args))
    return finish_cli(result, args)
