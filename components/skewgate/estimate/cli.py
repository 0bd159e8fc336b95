"""`skewgate estimate --onnx MODEL.onnx (--reference EVAL.npz [--labels LABELS.npy] | --profile P) --current CUR.npz
[--max-drop D] [--metric accuracy|macro_f1] [--profile-out P] --report R.json`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from skewgate.common.cli_support import add_common_args, describe, finish_cli, tracking_options
from skewgate.estimate.core import EstimateOptions, feature_columns
from skewgate.estimate.method.confusion import Metric
from skewgate.estimate.run import run

_DEFAULTS = EstimateOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate estimate")
    describe(parser, "Estimate a classifier's accuracy (or macro-F1) on unlabelled current data, with an interval, "
                     "from its scores calibrated on a labelled reference (CBPE), and block when the whole interval "
                     "lies more than --max-drop below the reference. Assumes no concept shift.",
             example="""
                 skewgate estimate --onnx model.onnx --reference eval.npz --current serving.npz \\
                     --max-drop 0.02 --plot reliability.png --report estimate.json
                 skewgate estimate --onnx model.onnx --reference eval.parquet --current tonight.parquet \\
                     --features age,income,score --labels-key label --report estimate.json
                 # fit once on the labelled reference, then estimate without labels from the profile
                 skewgate estimate --onnx model.onnx --reference eval.npz --current eval.npz \
                     --profile-out estimate.profile --report fit.json
                 skewgate estimate --onnx model.onnx --profile estimate.profile --current tonight.npz \
                     --report tonight.json
             """)
    parser.add_argument("--onnx", required=True, type=Path, help="the model (a classifier) as ONNX")
    side = parser.add_mutually_exclusive_group(required=True)
    side.add_argument("--reference", type=Path,
                      help="labelled reference inputs: .npz arrays named like the model's inputs, or a Parquet/CSV "
                           "file with --features")
    side.add_argument("--profile", type=Path,
                      help="an estimate profile of this model (--profile-out): its calibration and reference "
                           "figures, so no labels are needed; its --resamples and --seed are used")
    parser.add_argument("--labels", type=Path,
                        help="the reference's labels as .npy (default: its array or column named by --labels-key)")
    parser.add_argument("--labels-key", default=_DEFAULTS.labels_key, metavar="NAME",
                        help=f"the reference's array or column of labels (default: {_DEFAULTS.labels_key})")
    parser.add_argument("--current", required=True, type=Path,
                        help="unlabelled current inputs, as the reference's (.npz, or Parquet/CSV with --features)")
    parser.add_argument("--current-labels", type=Path, metavar="LABELS.npy",
                        help="labels of the current data, when they arrive later: the metrics they realise are "
                             "reported beside the estimates (the estimator's track record; nothing is judged on them)")
    parser.add_argument("--features", default="", metavar="COL,COL,…",
                        help="table columns that are the model's one input, in order (Parquet/CSV inputs)")
    parser.add_argument("--output", help="graph output holding the scores (default: the first)")
    parser.add_argument("--metric", choices=get_args(Metric), default=_DEFAULTS.metric,
                        help=f"the metric judged (both are reported; default: {_DEFAULTS.metric})")
    parser.add_argument("--max-drop", type=float, default=_DEFAULTS.max_drop,
                        help=f"largest drop below the reference's metric (default: {_DEFAULTS.max_drop})")
    parser.add_argument("--confidence", type=float, default=_DEFAULTS.confidence,
                        help=f"level of the interval (default: {_DEFAULTS.confidence})")
    parser.add_argument("--resamples", type=int, default=_DEFAULTS.resamples,
                        help=f"bootstrap calibrations behind the interval (default: {_DEFAULTS.resamples})")
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed, help=f"(default: {_DEFAULTS.seed})")
    parser.add_argument("--max-extrapolated", type=float, default=_DEFAULTS.max_extrapolated,
                        help="warn when more current samples than this share score outside the reference's range "
                             f"(default: {_DEFAULTS.max_extrapolated})")
    parser.add_argument("--max-extrapolated-judged", type=float, default=_DEFAULTS.max_extrapolated_judged,
                        help="beyond this share outside the reference's range the drop is not judged, and fails "
                             f"(default: {_DEFAULTS.max_extrapolated_judged})")
    parser.add_argument("--batch-rows", type=int, default=_DEFAULTS.batch_rows,
                        help=f"samples per model run and table batch (default: {_DEFAULTS.batch_rows})")
    parser.add_argument("--plot", type=Path, help="write the reliability plot (PNG) here")
    parser.add_argument("--profile-out", type=Path,
                        help="save the fit as an estimate profile here (with tracking, logged to the step run and "
                             "recorded with the version at promotion)")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = build_parser(parser)
    args = parser.parse_args(argv)
    options = EstimateOptions(metric=args.metric, max_drop=args.max_drop, confidence=args.confidence,
                              resamples=args.resamples, seed=args.seed, max_extrapolated=args.max_extrapolated,
                              max_extrapolated_judged=args.max_extrapolated_judged,
                              output=args.output, labels_key=args.labels_key,
                              features=feature_columns(args.features),
                              batch_rows=args.batch_rows)
    if args.profile is not None and args.labels is not None:
        parser.error("--labels goes with --reference (a profile holds what its labels said)")
    result = run(onnx=args.onnx, reference=args.reference, current=args.current, labels=args.labels,
                 profile=args.profile, profile_out=args.profile_out, current_labels=args.current_labels,
                 options=options, plot=args.plot,
                 tracking=tracking_options(args))
    return finish_cli(result, args)
