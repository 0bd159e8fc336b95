"""`skewgate compare --onnx CANDIDATE.onnx --model-name NAME [--alias champion] --eval EVAL.npz
[--labels LABELS.npy | --labels-key NAME] --report R.json`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import get_args

from skewgate.common.cli_support import add_common_args, describe, finish_cli, tracking_options
from skewgate.compare.core import TaskChoice, Threshold
from skewgate.compare.run import DEFAULT_THRESHOLDS, CompareOptions, run

_DEFAULTS = CompareOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate compare")
    describe(parser, "Run the candidate and the registry's champion on the same labelled eval set and block a "
                     "candidate that is worse: accuracy/macro-F1, pixel accuracy/mIoU, nearest-neighbour accuracy/"
                     "recall@k or MAE/RMSE with floors and a maximum regression "
                     "called by a paired-bootstrap interval, churn, and the same per slice.",
             example="""
                 skewgate compare --onnx candidate.onnx --model-name digits-cnn --eval eval.npz \\
                     --threshold accuracy:floor=0.9 --report compare.json
             """)
    parser.add_argument("--onnx", required=True, type=Path, help="the candidate ONNX file")
    parser.add_argument("--model-name", required=True, help="registered model whose champion to beat")
    parser.add_argument("--alias", default=_DEFAULTS.alias,
                        help=f"registry alias of the model to beat (default: {_DEFAULTS.alias})")
    parser.add_argument("--eval", required=True, type=Path,
                        help=".npz of model inputs (+ the labels array unless --labels, + optional slice array)")
    parser.add_argument("--labels", type=Path,
                        help=".npy of labels (default: the eval file's array named by --labels-key)")
    parser.add_argument("--labels-key", default=_DEFAULTS.labels_key, metavar="NAME",
                        help=f"array of the eval file that holds the labels (default: {_DEFAULTS.labels_key})")
    parser.add_argument("--task", choices=get_args(TaskChoice), default=_DEFAULTS.task,
                        help="classification, segmentation (labels per pixel), embedding (class labels: retrieval) or "
                             "regression (default: from the output and label shapes)")
    parser.add_argument("--output", help="graph output to judge (default: the first)")
    parser.add_argument("--slice-key", default=_DEFAULTS.slice_key,
                        help=f"eval array naming each sample's slice (default: {_DEFAULTS.slice_key})")
    parser.add_argument("--threshold", action="append", default=[], metavar="METRIC:FIELD=VALUE[,…]",
                        help="floor / max_regression / max_relative_regression per metric (repeatable; `none` "
                             "removes a limit). Defaults: "
                             + "; ".join(_threshold_spec(m, t) for m, t in DEFAULT_THRESHOLDS.items()))
    parser.add_argument("--confidence", type=float, default=_DEFAULTS.confidence,
                        help=f"bootstrap interval level (default: {_DEFAULTS.confidence})")
    parser.add_argument("--resamples", type=int, default=_DEFAULTS.resamples,
                        help=f"bootstrap resamples (default: {_DEFAULTS.resamples})")
    parser.add_argument("--seed", type=int, default=_DEFAULTS.seed,
                        help=f"seed of the bootstrap resampling (default: {_DEFAULTS.seed})")
    parser.add_argument("--max-churn", type=float, help="gate the share of changed top-1 answers (default: report)")
    parser.add_argument("--min-slice-size", type=int, default=_DEFAULTS.min_slice_size,
                        help=f"smaller slices are listed, not judged (default: {_DEFAULTS.min_slice_size})")
    parser.add_argument("--markdown", type=Path, help="write the champion-vs-candidate table here")
    add_common_args(parser)
    return parser


def _threshold_spec(metric: str, threshold: Threshold) -> str:
    """A default threshold written as `--threshold` takes it: `accuracy:max_regression=0.005`."""
    limits = [f"{field.name}={value:g}" for field in dataclasses.fields(threshold)
              if (value := getattr(threshold, field.name)) is not None]
    return f"{metric}:{','.join(limits) or 'none'}"


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    options = CompareOptions(alias=args.alias, task=args.task, output=args.output, slice_key=args.slice_key,
                             labels_key=args.labels_key,
                             threshold_specs=tuple(args.threshold), confidence=args.confidence,
                             resamples=args.resamples, seed=args.seed, max_churn=args.max_churn,
                             min_slice_size=args.min_slice_size)
    result = run(onnx=args.onnx, model_name=args.model_name, eval_data=args.eval, labels=args.labels,
                  options=options, markdown=args.markdown, tracking=tracking_options(args))
    return finish_cli(result, args)
