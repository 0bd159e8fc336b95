"""`skewgate probe --url URL --model NAME --onnx model.onnx --inputs X.npz --report probe.json`, plus
`skewgate probe serve --onnx model.onnx --name NAME` (a local Triton to try the probe by hand) and
`skewgate probe install` (unpack tritonserver and its backend environment)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

from skewgate.common.cli_support import (
    EXIT_ERROR,
    add_common_args,
    add_output_task_args,
    configure_logging,
    describe,
    finish_cli,
    output_task_options,
    tracking_options,
)
from skewgate.common.errors import InputError, SkewgateError
from skewgate.common.triton.client import Protocol
from skewgate.common.triton.repository import Platform

REQUIRED = ("model", "onnx", "inputs")  # required by the probe itself, not by its subcommands
# `probe serve` writes here, never into the current folder
SERVE_WORKDIR = Path(tempfile.gettempdir()) / "skewgate-probe-serve"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from skewgate.probe.run import ProbeOptions

    defaults = ProbeOptions()
    parser = parser or argparse.ArgumentParser(prog="skewgate probe")
    describe(parser, "Check a Triton deployment against the gated ONNX model: health, signature, config, served "
                     "file, outputs, batching, latency. `probe serve` and `probe install` also exist.",
             example="""
                 skewgate probe --url 127.0.0.1:8000 --model digits-cnn --onnx model.onnx --inputs X.npz \\
                     --repository /tmp/skewgate-probe-serve/triton-repo --report probe.json
                 skewgate probe --model gru-step --onnx step.onnx --inputs seq.npz \
                     --stream --state h=h_next --initial-state h0.npz --report probe.json
             """)
    parser.add_argument("--url", help="host:port of the server; omit to start a local tritonserver for the probe")
    parser.add_argument("--protocol", choices=get_args(Protocol), default=defaults.protocol,
                        help=f"KServe v2 protocol to talk to the server with (default: {defaults.protocol})")
    parser.add_argument("--model", help="model name on the server (required)")
    parser.add_argument("--onnx", type=Path, help="the gated ONNX model (required)")
    parser.add_argument("--inputs", type=Path, help=".npz of probe inputs named as the model's (required)")
    parser.add_argument("--model-version", default=defaults.version,
                        help="version that must be served (default: the latest)")
    parser.add_argument("--repository", type=Path, help="the model repository, if readable (checks the served file)")
    parser.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                        help="extra request header, e.g. Authorization=Bearer… (repeatable)")
    parser.add_argument("--tls", action="store_true", help="use TLS")
    parser.add_argument("--ca-cert", help="CA bundle for TLS")
    parser.add_argument("--deadline", type=float, default=defaults.deadline_s,
                        help=f"seconds per call, retries included (default: {defaults.deadline_s:g})")
    parser.add_argument("--max-p99-ms", type=float, default=defaults.max_p99_ms,
                        help=f"latency gate on the p99 at concurrency 1, in ms (default: {defaults.max_p99_ms:g})")
    add_output_task_args(parser.add_argument_group(
        "how outputs agree", "each output's agreement with ONNX Runtime FP32 (`outputs_agree.<output>`), judged as "
        "calibrate and parity --int8 judge INT8's"), defaults)
    stream = parser.add_argument_group("stateful model (--stream)", "a STEP model served under Triton's sequence "
                                       "batcher, its state kept on the server; --inputs holds sequences (batch on "
                                       "axis 0, time on axis 1), each probed under its own correlation id")
    stream.add_argument("--stream", action="store_true", default=defaults.stream,
                        help="probe a stateful STEP model (without --url: serve it under the sequence batcher)")
    stream.add_argument("--state", action="append", default=[], metavar="IN=OUT",
                        help="a state input of STEP and the output of its next value (repeatable)")
    stream.add_argument("--initial-state", type=Path, default=defaults.initial_state,
                        help=".npz of one sequence's initial state, keyed by state input (default: zeros)")
    stream.add_argument("--max-sequences", type=int, default=defaults.max_sequences,
                        help=f"sequences probed, from the start of --inputs (default: {defaults.max_sequences})")
    add_common_args(parser)
    commands = parser.add_subparsers(dest="command", metavar="{serve,install}", required=False,
                                     help="without one, the probe")
    serve = commands.add_parser("serve", help="serve an ONNX model with a local tritonserver until Ctrl-C")
    describe(serve, "Serve an ONNX model with a local tritonserver until Ctrl-C (to try the probe by hand); "
                    "it prints the HTTP and gRPC addresses and the probe command to run.",
             example="""
                 skewgate probe serve --onnx model.onnx --name digits-cnn
             """)
    serve.add_argument("--onnx", required=True, type=Path, help="the ONNX model to serve")
    serve.add_argument("--name", required=True, help="model name on the server (the probe's --model)")
    serve.add_argument("--workdir", type=Path, default=SERVE_WORKDIR,
                       help="folder for the model repository and the server log (default: %(default)s)")
    serve.add_argument("--repository", type=Path,
                       help="model repository to write and serve (default: WORKDIR/triton-repo)")
    serve.add_argument("--platform", choices=get_args(Platform), default="python",
                       help="python: a Python-backend model running the file with onnxruntime (the only backend "
                            "of the nvidia-pytriton tritonserver); onnxruntime_onnx: Triton's ONNX Runtime backend "
                            "(default: %(default)s)")
    serve.set_defaults(handler=_serve)
    install = commands.add_parser("install", help="unpack tritonserver and build its backend environment")
    describe(install, "Unpack tritonserver (nvidia-pytriton wheel) and build the Python backend's environment "
                      "(numpy<2, onnxruntime).",
             example="""
                 skewgate probe install --home ~/.cache/skewgate/triton
             """)
    install.add_argument("--home", type=Path,
                         help="where to install (default: $SKEWGATE_TRITON_HOME, else the checkout's .triton when "
                              "it exists, else ~/.cache/skewgate/triton)")
    install.set_defaults(handler=_install)
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    parser = build_parser(parser)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command is not None:
        return int(args.handler(args))
    missing = [f"--{name}" for name in REQUIRED if getattr(args, name) is None]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")

    from skewgate.common.states import parse_states
    from skewgate.probe.run import ProbeOptions, run

    tracking = tracking_options(args)  # a tracking URI MLflow would misread is refused first, as in every step
    headers = {}
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep:
            raise InputError("--header", field=item, expected="NAME=VALUE", found="no '='")
        headers[name] = value
    options = ProbeOptions(protocol=args.protocol, version=args.model_version, headers=headers, tls=args.tls,
                           ca_certificate=args.ca_cert, deadline_s=args.deadline, max_p99_ms=args.max_p99_ms,
                           stream=args.stream, states=parse_states(args.state),
                           initial_state=str(args.initial_state) if args.initial_state else None,
                           max_sequences=args.max_sequences, **output_task_options(args))
    result = run(url=args.url or "", model=args.model, onnx=args.onnx, inputs=args.inputs,
                  repository=args.repository, options=options, tracking=tracking)
    return finish_cli(result, args)


def _serve(args: argparse.Namespace) -> int:
    configure_logging()
    from skewgate.common.triton.repository import write_repository
    from skewgate.common.triton.server import find_installation, triton_server

    repository = args.repository or args.workdir / "triton-repo"
    try:
        installation = find_installation()  # before anything is written
        written = write_repository(args.onnx, repository, name=args.name, platform=args.platform)
        with triton_server(repository, models=(args.name,), installation=installation,
                           log_path=repository.parent / "tritonserver.log") as server:
            print(f"serving {args.name} v{written.version} (sha256 {written.sha256[:12]}…)\n"
                  f"  HTTP {server.http_url}   gRPC {server.grpc_url}   log {server.log_path}\n"
                  f"  try: skewgate probe --url {server.http_url} --model {args.name} --onnx {args.onnx} "
                  f"--inputs X.npz --repository {repository}\nCtrl-C stops it.", file=sys.stderr)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except SkewgateError as err:
        print(f"probe serve: {err}", file=sys.stderr)
        return EXIT_ERROR


def _install(args: argparse.Namespace) -> int:
    from skewgate.common.triton.server import install

    try:
        found = install(args.home)
    except (SkewgateError, OSError) as err:
        print(f"probe install: {err}", file=sys.stderr)
        return EXIT_ERROR
    print(f"tritonserver ready: {found.binary}", file=sys.stderr)
    return 0
