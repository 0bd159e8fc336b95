"""`skewgate calibrate --onnx model.onnx --calibration CALIB.npz --eval EVAL.npz [--labels LABELS.npy]
--out model.int8.onnx --report calib.json [--method auto|minmax|percentile|entropy|mse] [--max-accuracy-drop 0.01]`"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import get_args

from skewgate.calibrate.run import CalibrateOptions, run
from skewgate.common.cli_support import (
    add_common_args,
    add_output_task_args,
    describe,
    finish_cli,
    output_task_options,
    tracking_options,
)

_DEFAULTS = CalibrateOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from skewgate.calibrate.int8.ranges import Method

    parser = parser or argparse.ArgumentParser(prog="skewgate calibrate")
    describe(parser, "Calibrate and quantise an ONNX model to INT8 (QDQ) in bounded memory, robust to activation "
                     "outliers, and gate on the accuracy drop; layers that break the budget are kept in FP32 one at "
                     "a time.",
             example="""
                 skewgate calibrate --onnx model.onnx --calibration calib.npz --eval eval.npz \\
                     --out model.int8.onnx --report calibrate.json --plot calibrate.png
             """)
    parser.add_argument("--onnx", required=True, type=Path, help="the FP32 ONNX model")
    parser.add_argument("--calibration", required=True, type=Path, help=".npz named as the model's inputs")
    parser.add_argument("--eval", required=True, type=Path, dest="eval_data",
                        help=".npz of eval inputs (a 'labels' array beside them is used as labels)")
    parser.add_argument("--labels", type=Path,
                        help=".npy of class indices for the eval inputs (or an .npz holding a 'labels' array)")
    parser.add_argument("--out", required=True, type=Path, help="where to write the INT8 model")
    parser.add_argument("--method", choices=get_args(Method), default=_DEFAULTS.method,
                        help="range per tensor (default: auto, the least expected quantisation error)")
    parser.add_argument("--max-accuracy-drop", type=float, default=_DEFAULTS.max_accuracy_drop,
                        help="budget: accuracy points with labels, else top-1 disagreement (default: %(default)s)")
    add_output_task_args(parser.add_argument_group(
        "how the INT8 outputs are judged (as parity --int8 judges them; a policy bounds them as every setting)"),
        _DEFAULTS)
    parser.add_argument("--max-fallback-layers", type=int, default=_DEFAULTS.max_fallback_layers,
                        help="most candidates (layers, op groups, 7-bit weights) tried while chasing the budget "
                             "(default: %(default)s)")
    parser.add_argument("--min-int8-mac-share", type=float, default=_DEFAULTS.min_int8_mac_share,
                        help="warn when the written model runs a smaller share of its MACs in INT8 "
                             "(default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size,
                        help="samples per ONNX Runtime call while calibrating and evaluating (default: %(default)s)")
    parser.add_argument("--min-calibration-samples", type=int, default=_DEFAULTS.min_calibration_samples,
                        help="fewer calibration samples than this is an error: the ranges would not be trusted "
                             "(default: %(default)s)")
    parser.add_argument("--no-equalize", action="store_true", help="never rescale outlier channels")
    parser.add_argument("--per-tensor-weights", action="store_true", help="per-tensor instead of per-channel")
    parser.add_argument("--plot", type=Path, help="write calibration histograms and per-layer SQNR (PNG)")
    parser.add_argument("--html", type=Path, help="write the HTML report")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(sys.argv[1:] if argv is None else argv)
    options = CalibrateOptions(method=args.method, max_accuracy_drop=args.max_accuracy_drop,
                               max_fallback_layers=args.max_fallback_layers, batch_size=args.batch_size,
                               min_int8_mac_share=args.min_int8_mac_share,
                               min_calibration_samples=args.min_calibration_samples,
                               equalize=not args.no_equalize, per_channel=not args.per_tensor_weights,
                               **output_task_options(args),
                               plot_name="", html_name="")  # logged under the files' own names
    result = run(onnx=args.onnx, calibration=args.calibration, eval_data=args.eval_data, out=args.out,
                  labels=args.labels, plot=args.plot, html=args.html, options=options,
                  tracking=tracking_options(args))
    return finish_cli(result, args)
