"""`skewgate export --model M.pt2 --inputs X.npz --out model.onnx --report export.json`."""

from __future__ import annotations

import argparse
from pathlib import Path

from skewgate.common.cli_support import add_common_args, describe, finish_cli, tracking_options
from skewgate.export.run import ExportOptions, run

_DEFAULTS = ExportOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate export")
    describe(parser, "Export a torch.export program (.pt2) or an MLflow pytorch model URI to ONNX with the dynamo "
                     "exporter, and check it against PyTorch: outputs, batch invariance, determinism, model lint, "
                     "input hash chain.",
             example="""
                 skewgate export --model model.pt2 --inputs examples.npz --out model.onnx --report export.json
                 skewgate export --model step.pt2 --inputs step.npz --out step.onnx --state h=#1 --report export.json
             """)
    parser.add_argument("--model", required=True,
                        help=".pt2 ExportedProgram (opened with no pickle), or models:/… / runs:/… with "
                             "--allow-pickle")
    parser.add_argument("--inputs", required=True, type=Path, help=".npz of example inputs named as the model's")
    parser.add_argument("--out", required=True, type=Path, help="where to write the ONNX model")
    parser.add_argument("--tolerance", action="append", default=[], metavar="OUTPUT=RTOL,ATOL",
                        help="override the dtype-default tolerance for one output (repeatable)")
    parser.add_argument("--state", action="append", default=[], metavar="IN=OUT",
                        help="a step model's state input and the ONNX output of its next value, by name or as #K "
                             "(its position among the outputs); repeat for each state. Missing from --inputs, a "
                             "state starts at zeros")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="allow an MLflow pytorch model URI: it unpickles code, so trusted registries only")
    parser.add_argument("--max-samples", type=int, default=_DEFAULTS.max_samples,
                        help=f"examples used for comparison and batch invariance (default: {_DEFAULTS.max_samples})")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    options = ExportOptions(tolerances=tuple(args.tolerance), max_samples=args.max_samples,
                            allow_pickle=args.allow_pickle, states=tuple(args.state))
    result = run(model=args.model, inputs=args.inputs, out=args.out, options=options,
                  tracking=tracking_options(args))
    return finish_cli(result, args)
