"""`skewgate drift --reference REF --current CUR --report drift.json [--heatmap heat.png] [--html r.html]`
and `skewgate drift profile --reference REF --out ref.profile`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import get_args

from skewgate.common.cli_support import (
    EXIT_ERROR,
    add_common_args,
    configure_logging,
    describe,
    finish_cli,
    tracking_options,
)
from skewgate.common.errors import SkewgateError
from skewgate.drift.run import DEFAULTS, DriftOptions, run, write_profile
from skewgate.drift.stats.ks import Correction
from skewgate.drift.stats.periods import PERIODS
from skewgate.drift.stats.series import SeriesOptions


def _add_options(parser: argparse.ArgumentParser) -> None:
    """The flags the gate and `profile` share (how the reference is read and embedded)."""
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed,
                        help=f"seed for subsampling, features, permutations (default: {DEFAULTS.seed})")
    parser.add_argument("--embed-onnx", type=Path, help="compute MMD on this ONNX model's output")
    parser.add_argument("--embed-output", help="name of the graph output to embed with")
    parser.add_argument("--feature-axis", action="append", default=[], type=_axis, metavar="ARRAY=AXIS",
                        help="the feature axis of an N-D .npz array (default: channels of NCHW/NHWC images, the last "
                             "axis otherwise); the other positions are pooled")
    parser.add_argument("--ids", action="append", default=[], metavar="COLUMN",
                        help="an integer or string column (or an integer array) of ids (tokens, items, codes): "
                             f"tested as categories, the {DEFAULTS.max_categories:,} most frequent reference ids plus "
                             f"\"(other)\" (ranked on a seeded {DEFAULTS.id_selection_share:.0%}% of the reference "
                             "rows, tested on the rest), and every id checked against those the reference held "
                             "(new_ids)")
    parser.add_argument("--timestamp", default=DEFAULTS.timestamp, metavar="COLUMN",
                        help="the column saying when each row was logged (a timestamp, date or ISO-8601 text): not a "
                             "feature; with `profile --period` it sets each row's period")


def _axis(text: str) -> tuple[str, int]:
    name, sep, axis = text.rpartition("=")
    if not sep or not name or not axis.lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected ARRAY=AXIS (an integer axis), got {text!r}")
    return name, int(axis)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate drift")
    parser.usage = ("%(prog)s --reference REF --current CUR [options]\n"
                    "       %(prog)s profile --reference REF --out PROFILE [options]")
    describe(parser, "KS per feature (chi-square for categories) with multiple-testing correction, plus MMD² with "
                     "an RBF kernel. Neither drifts: pass; one: warn (exit 0); both: fail (exit 1).",
             example="""
                 skewgate drift profile --reference train.parquet --out ref.profile
                 skewgate drift --reference ref.profile --current serving.parquet --report drift.json \\
                     --heatmap drift.png --html drift.html
             """)
    # Required unless a subcommand is given: checked in `main` (argparse cannot say "required without one").
    parser.add_argument("--reference", help="Parquet/CSV file, directory, glob or URI; .npz; or a drift profile "
                                            "(required)")
    parser.add_argument("--current", help="the same kinds of input, with the same columns (required)")
    parser.add_argument("--heatmap", type=Path, help="write the coverage heatmap PNG here")
    parser.add_argument("--html", type=Path, help="write the HTML report here")
    parser.add_argument("--model", type=Path, help="the model artifact the verdict is about (promote matches it)")
    parser.add_argument("--alpha-ks", type=float, default=DEFAULTS.alpha_ks,
                        help="significance level of the per-feature tests, after the correction "
                             f"(default: {DEFAULTS.alpha_ks})")
    parser.add_argument("--alpha-mmd", type=float, default=DEFAULTS.alpha_mmd,
                        help=f"significance level of the MMD² permutation test (default: {DEFAULTS.alpha_mmd})")
    parser.add_argument("--correction", choices=get_args(Correction), default=DEFAULTS.correction,
                        help="multiple-testing correction over the features: bh (Benjamini-Hochberg, false "
                             f"discovery rate) or bonferroni (family-wise) (default: {DEFAULTS.correction})")
    parser.add_argument("--min-effect", type=float, default=DEFAULTS.min_effect,
                        help=f"KS D / Cramér's V floor (default {DEFAULTS.min_effect})")
    parser.add_argument("--permutations", type=int, default=DEFAULTS.permutations,
                        help=f"permutations behind the MMD² p-value (default: {DEFAULTS.permutations})")
    parser.add_argument("--series-state", type=Path, metavar="FILE",
                        help="monitor a series of nights against one reference: read the running e-value from this "
                             "JSON file (absent: a new series), add the anytime-valid check "
                             "`series.anytime_valid`, write the file back")
    parser.add_argument("--series-alpha", type=float, default=DEFAULTS.series.alpha,
                        help="with --series-state: P(any false alarm over every night) ≤ this "
                             f"(default: {DEFAULTS.series.alpha})")
    parser.add_argument("--pushgateway", default=DEFAULTS.pushgateway_url,
                        help="push the figures to this Prometheus Pushgateway URL")
    parser.add_argument("--pushgateway-model", default=DEFAULTS.pushgateway_model,
                        help=f"the `model` label of the pushed series (default: {DEFAULTS.pushgateway_model})")
    _add_options(parser)
    add_common_args(parser)
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND",
                                     help="without one, the drift check")
    profile = commands.add_parser("profile", prog=f"{parser.prog} profile",
                                  help="build a reusable reference profile from the training data")
    describe(profile, "Build a reusable reference profile from the training data; later checks read it with "
                      "--reference instead of the data.",
             example="""
                 skewgate drift profile --reference train.parquet --out ref.profile
                 skewgate drift --reference ref.profile --current serving.parquet --report drift.json
             """)
    profile.add_argument("--reference", required=True, type=Path,
                         help="the training data: Parquet/CSV file, directory or glob, or .npz")
    profile.add_argument("--out", required=True, type=Path, help="where to write the profile")
    profile.add_argument("--sketch", type=int, default=DEFAULTS.sketch,
                         help="values kept per feature sketch (the KS error bound is recorded in the profile; "
                              f"default: {DEFAULTS.sketch})")
    profile.add_argument("--period", choices=PERIODS, default=DEFAULTS.period,
                         help="data with a known cycle: the profile holds one profile per period of --timestamp "
                              "(weekday: Mon … Sun), and a check against it (whose rows must all fall in one period) "
                              f"is judged against its own period's (default: {DEFAULTS.period})")
    _add_options(profile)
    profile.set_defaults(handler=_profile)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = build_parser(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is not None:
        return int(args.handler(args))
    missing = [flag for flag, value in (("--reference", args.reference), ("--current", args.current)) if not value]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")

    tracking = tracking_options(args)  # a tracking URI MLflow would misread is refused first, as in every step
    options = DriftOptions(alpha_ks=args.alpha_ks, alpha_mmd=args.alpha_mmd, correction=args.correction,
                           min_effect=args.min_effect, permutations=args.permutations, seed=args.seed,
                           feature_axes=tuple(args.feature_axis), ids=tuple(args.ids), timestamp=args.timestamp,
                           series=SeriesOptions(alpha=args.series_alpha), pushgateway_url=args.pushgateway,
                           pushgateway_model=args.pushgateway_model,
                           heatmap_name="", html_name="")  # logged under the files' own names
    result = run(reference=args.reference, current=args.current, model=args.model, embed_onnx=args.embed_onnx,
                  embed_output=args.embed_output, heatmap=args.heatmap, html=args.html,
                  series_state=args.series_state, options=options, tracking=tracking)
    return finish_cli(result, args)


def _profile(args: argparse.Namespace) -> int:
    configure_logging()
    options = DriftOptions(seed=args.seed, sketch=args.sketch, feature_axes=tuple(args.feature_axis),
                           ids=tuple(args.ids), timestamp=args.timestamp, period=args.period)
    try:
        profiles = write_profile(args.reference, args.out, options=options, embed_onnx=args.embed_onnx,
                                 embed_output=args.embed_output)
    except SkewgateError as err:
        print(f"drift profile: {err}", file=sys.stderr)
        return EXIT_ERROR
    for label, profile in profiles.items():
        print(f"wrote {args.out}{f' [{label}]' if label else ''} ({profile.rows} rows, KS error bound "
              f"{profile.ks_error_bound:.2g})", file=sys.stderr)
    return 0
