"""`skewgate drift --reference REF --current CUR --report drift.json [--heatmap heat.png] [--html r.html]`
and `skewgate drift profile --reference REF --out ref.profile`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import get_args

from skewgate.common.cli_support import EXIT_ERROR, add_common_args, configure_logging, run_step
from skewgate.common.errors import SkewgateError
from skewgate.common.verdict import Verdict
from skewgate.drift.stats.ks import Correction


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="seed for subsampling, features, permutations")
    parser.add_argument("--embed-onnx", type=Path, help="compute MMD on this ONNX model's output")
    parser.add_argument("--embed-output", help="name of the graph output to embed with")
    parser.add_argument("--feature-axis", action="append", default=[], type=_axis, metavar="ARRAY=AXIS",
                        help="the feature axis of an N-D .npz array (default: channels of NCHW/NHWC images, the last "
                             "axis otherwise); the other positions are pooled")
    parser.add_argument("--ids", action="append", default=[], metavar="COLUMN",
                        help="an integer column or array of ids (tokens, items): tested as categories, the 1,000 most "
                             "frequent reference ids plus \"(other)\"")


def _axis(text: str) -> tuple[str, int]:
    name, sep, axis = text.rpartition("=")
    if not sep or not name or not axis.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected ARRAY=AXIS (an integer axis), got {text!r}")
    return name, int(axis)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate drift")
    parser.description = ("KS per feature (chi-square for categories) with multiple-testing correction, plus MMD² "
                          "with an RBF kernel. Neither drifts: pass; one: warn (exit 0); both: fail (exit 1).")
    parser.add_argument("--reference", required=True,
                        help="Parquet/CSV file, directory, glob or URI; .npz; or a drift profile")
    parser.add_argument("--current", required=True, help="the same kinds of input, with the same columns")
    parser.add_argument("--heatmap", type=Path, help="write the coverage heatmap PNG here")
    parser.add_argument("--html", type=Path, help="write the HTML report here")
    parser.add_argument("--model", type=Path, help="the model artifact the verdict is about (promote matches it)")
    parser.add_argument("--alpha-ks", type=float, default=0.05)
    parser.add_argument("--alpha-mmd", type=float, default=0.05)
    parser.add_argument("--correction", choices=get_args(Correction), default="bh")
    parser.add_argument("--min-effect", type=float, default=0.05, help="KS D / Cramér's V floor (default 0.05)")
    parser.add_argument("--permutations", type=int, default=200)
    parser.add_argument("--pushgateway", help="push the figures to this Prometheus Pushgateway URL")
    parser.add_argument("--pushgateway-model", default="skewgate",
                        help="the `model` label of the pushed series (default: skewgate)")
    _add_options(parser)
    add_common_args(parser)
    return parser


def build_profile_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skewgate drift profile",
                                     description="Build a reusable reference profile from the training data.")
    parser.add_argument("--reference", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sketch", type=int, default=4096,
                        help="values kept per feature sketch (the KS error bound is recorded in the profile)")
    _add_options(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["profile"]:
        return _profile(argv[1:])
    args = build_parser(parser).parse_args(argv)

    def evaluate(run: object) -> Verdict:
        from skewgate.common.mlflow_log import StepRun
        from skewgate.drift.core import DriftOptions, drift_gate
        from skewgate.drift.run import publish, push

        options = DriftOptions(alpha_ks=args.alpha_ks, alpha_mmd=args.alpha_mmd, correction=args.correction,
                               min_effect=args.min_effect, permutations=args.permutations, seed=args.seed,
                               feature_axes=tuple(args.feature_axis), ids=tuple(args.ids))
        result = drift_gate(reference=args.reference, current=args.current, options=options,
                            embed_onnx=args.embed_onnx, embed_output=args.embed_output, model=args.model)
        publish(result, run if isinstance(run, StepRun) else None, heatmap=args.heatmap, html=args.html,
                heatmap_name=args.heatmap.name if args.heatmap else "", html_name=args.html.name if args.html else "")
        if args.pushgateway:
            pushed = push(result, gateway=args.pushgateway, model=args.pushgateway_model)
            return dataclasses.replace(result.verdict, details={**result.verdict.details, "pushgateway": pushed})
        return result.verdict

    return run_step("drift", args, evaluate)


def _profile(argv: list[str]) -> int:
    args = build_profile_parser().parse_args(argv)
    configure_logging()
    from skewgate.drift.core import DriftOptions, make_profile
    from skewgate.drift.stats.profile import save_profile

    try:
        profile = make_profile(args.reference, options=DriftOptions(seed=args.seed, sketch=args.sketch,
                                                                    feature_axes=tuple(args.feature_axis),
                                                                    ids=tuple(args.ids)),
                               embed_onnx=args.embed_onnx, embed_output=args.embed_output, exact=False)
        save_profile(profile, args.out)
    except SkewgateError as err:
        print(f"drift profile: {err}", file=sys.stderr)
        return EXIT_ERROR
    print(f"wrote {args.out} ({profile.rows} rows, KS error bound {profile.ks_error_bound:.2g})", file=sys.stderr)
    return 0
