"""`skewgate export --model M.pt2 --inputs X.npz --out model.onnx --report export.json`."""

from __future__ import annotations

import argparse
from pathlib import Path

from skewgate.common.cli_support import add_common_args, run_step
from skewgate.common.compare import Tolerance
from skewgate.common.verdict import Verdict


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate export")
    parser.description = ("Export a torch.export program (.pt2) or an MLflow pytorch model URI to ONNX with the "
                          "dynamo exporter, and check it against PyTorch: outputs, batch invariance, "
                          "determinism, model lint, input hash chain.")
    parser.add_argument("--model", required=True,
                        help=".pt2 ExportedProgram (opened with no pickle), or models:/… / runs:/… with "
                             "--allow-pickle")
    parser.add_argument("--inputs", required=True, type=Path, help=".npz of example inputs named as the model's")
    parser.add_argument("--out", required=True, type=Path, help="where to write the ONNX model")
    parser.add_argument("--tolerance", action="append", default=[], metavar="OUTPUT=RTOL,ATOL",
                        help="override the dtype-default tolerance for one output (repeatable)")
    parser.add_argument("--allow-pickle", action="store_true",
                        help="allow an MLflow pytorch model URI: it unpickles code, so trusted registries only")
    parser.add_argument("--max-samples", type=int, default=64,
                        help="examples used for comparison and batch invariance (default: 64)")
    add_common_args(parser)
    return parser


def _tolerances(items: list[str]) -> dict[str, Tolerance]:
    from skewgate.common.errors import InputError

    result = {}
    for item in items:
        name, _, spec = item.partition("=")
        try:
            result[name] = Tolerance.parse(spec)
        except ValueError as err:
            raise InputError("--tolerance", field=item, expected="OUTPUT=RTOL,ATOL", found=str(err)) from err
    return result


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)

    def evaluate(_run: object) -> Verdict:
        from skewgate.export.core import export_model

        return export_model(model=args.model, inputs=args.inputs, out=args.out,
                            tolerances=_tolerances(args.tolerance), max_samples=args.max_samples,
                            allow_pickle=args.allow_pickle)

    return run_step("export", args, evaluate)
