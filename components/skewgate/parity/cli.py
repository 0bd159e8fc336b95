"""`skewgate parity --torch M.pt2 --onnx model.onnx [--int8 …] [--fp16 [FP16.onnx] [--fp16-out F.onnx]]
[--triton-url URL --triton-model NAME [--triton-deadline S]]
--inputs X.npz [--layerwise] --report parity.json [--plot layers.png] [--html parity.html]`;
stream mode: `… --stream-onnx STEP.onnx --state IN=OUT [--state IN=OUT …] [--initial-state S.npz]`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skewgate.common.cli_support import (
    add_common_args,
    add_output_task_args,
    describe,
    finish_cli,
    output_task_options,
    tracking_options,
)
from skewgate.common.states import parse_states
from skewgate.parity.run import ParityOptions, run

_DEFAULTS = ParityOptions()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate parity")
    describe(parser, "Compare PyTorch, ONNX Runtime FP32/INT8 and a Triton server on the same inputs; with "
                     "--layerwise, every intermediate value, naming the first layer that diverges.",
             example="""
                 skewgate parity --torch model.pt2 --onnx model.onnx --int8 model.int8.onnx --inputs X.npz \\
                     --layerwise --report parity.json --plot layer_errors.png --html parity.html
             """)
    parser.add_argument("--torch", required=True, help=".pt2 ExportedProgram (or an MLflow pytorch URI)")
    parser.add_argument("--onnx", required=True, type=Path, help="the FP32 ONNX model")
    parser.add_argument("--int8", type=Path, help="an INT8 (QDQ) ONNX model to judge against the FP32 one")
    parser.add_argument("--fp16", nargs="?", const=True, default=False, metavar="FP16_ONNX",
                        help="judge an FP16 model value by value against the FP32 one: the given file, or (no "
                             "path) the FP32 model converted by onnxconverter-common with FP32 inputs/outputs")
    parser.add_argument("--fp16-out", type=Path,
                        help="write the FP16 model with the proposed nodes kept in FP32 here (once it passes)")
    parser.add_argument("--fp16-cuda", action="store_true",
                        help="run the FP16 comparison on ONNX Runtime's CUDA provider (needs onnxruntime-gpu)")
    parser.add_argument("--triton-url", help="host:port of a Triton server serving the model")
    parser.add_argument("--triton-model", help="model name on that server")
    parser.add_argument("--triton-protocol", choices=["http", "grpc"], default=_DEFAULTS.triton_protocol,
                        help="protocol to talk to the Triton server with (default: %(default)s)")
    parser.add_argument("--triton-serves", choices=["fp32", "fp16", "int8"], default=_DEFAULTS.triton_serves,
                        help="what the Triton model computes in: fp32 (held to FP32's tolerances and the agreement) "
                             "or an fp16 / int8 deployment (the agreement alone; the release policy must allow it) "
                             "(default: %(default)s)")
    parser.add_argument("--triton-deadline", type=float, default=_DEFAULTS.triton_deadline_s,
                        help="seconds per call to Triton, retries included (default: %(default)g)")
    parser.add_argument("--inputs", required=True, type=Path, help=".npz named as the model's inputs")
    parser.add_argument("--layerwise", action="store_true", help="compare every intermediate value")
    parser.add_argument("--plot", type=Path, help="write the per-layer error plot (PNG)")
    parser.add_argument("--html", type=Path, help="write the HTML report")
    parser.add_argument("--stream-onnx", type=Path, help="stream mode: the one-step model as served (STEP), judged "
                        "against --onnx run on whole sequences (time on axis 1 of --inputs)")
    parser.add_argument("--state", action="append", default=[], metavar="IN=OUT",
                        help="a STEP state input and the STEP output of its next value (repeat for each state)")
    parser.add_argument("--initial-state", type=Path,
                        help=".npz keyed by state input name: the state each sequence starts from (default zeros)")
    parser.add_argument("--batch-size", type=int, default=_DEFAULTS.batch_size,
                        help="samples per model call (default: %(default)s)")
    parser.add_argument("--max-samples", type=int, default=_DEFAULTS.max_samples,
                        help="compare the first this many samples of --inputs (default: %(default)s)")
    limits = parser.add_argument_group("INT8 limits (with --int8; a policy bounds them as every setting)")
    add_output_task_args(limits, _DEFAULTS)  # calibrate's flags: one INT8 judgement (common/output_tasks.py)
    limits.add_argument("--max-kl-divergence", type=float, default=_DEFAULTS.max_kl_divergence,
                        help="softmax KL(FP32 || INT8) at most (default: %(default)s)")
    limits.add_argument("--min-output-sqnr-db", type=float, default=_DEFAULTS.min_output_sqnr_db,
                        help="INT8 vs FP32 SQNR of each final output at least, dB (default: %(default)s)")
    limits.add_argument("--min-layer-sqnr-db", type=float, default=_DEFAULTS.min_layer_sqnr_db,
                        help="INT8 intermediates below this SQNR diverge, dB (default: %(default)s)")
    add_common_args(parser)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(sys.argv[1:] if argv is None else argv)
    tracking = tracking_options(args)  # a tracking URI MLflow would misread is refused first, as in every step
    options = ParityOptions(layerwise=args.layerwise, batch_size=args.batch_size, max_samples=args.max_samples,
                            triton_protocol=args.triton_protocol, triton_serves=args.triton_serves,
                            triton_deadline_s=args.triton_deadline, fp16_cuda=args.fp16_cuda,
                            stream_onnx=args.stream_onnx, states=parse_states(args.state),
                            initial_state=args.initial_state, **output_task_options(args),
                            max_kl_divergence=args.max_kl_divergence, min_output_sqnr_db=args.min_output_sqnr_db,
                            min_layer_sqnr_db=args.min_layer_sqnr_db,
                            plot_name="", html_name="")  # logged under the files' own names
    result = run(torch_model=args.torch, onnx=args.onnx, inputs=args.inputs, int8=args.int8,
                  fp16=args.fp16 if isinstance(args.fp16, bool) else Path(args.fp16), fp16_out=args.fp16_out,
                  triton_url=args.triton_url, triton_model=args.triton_model, plot=args.plot, html=args.html,
                  options=options, tracking=tracking)
    return finish_cli(result, args)
