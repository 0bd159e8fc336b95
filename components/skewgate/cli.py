"""`skewgate <step> ...`: one entry point for every step, the pipeline tools and the demo.

Exit codes everywhere: 0 pass or warn, 1 gate failed, 2 could not evaluate (bad input, backend down).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import logging
import os
import sys
import threading
from typing import NoReturn

from skewgate import __version__
from skewgate.common.errors import SkewgateError
from skewgate.common.interrupts import Terminated, raise_on_sigterm

# subcommand → module with `build_parser(parser)` and `main(argv, parser)`; imported only when chosen.
COMMANDS = {
    "export": ("skewgate.export.cli", "PyTorch → ONNX export, checked against PyTorch"),
    "drift": ("skewgate.drift.cli", "KS per feature + MMD drift gate; `drift profile` builds a reference profile"),
    "parity": ("skewgate.parity.cli", "PyTorch vs ORT FP32/INT8 vs Triton, layer by layer"),
    "preprocess": ("skewgate.preprocess.cli", "training vs serving preprocessing on the same raw samples"),
    "calibrate": ("skewgate.calibrate.cli", "outlier-aware INT8 calibration with an accuracy budget and FP32 fallback"),
    "probe": ("skewgate.probe.cli", "check a Triton deployment against the model; `probe serve`, `probe install`"),
    "compare": ("skewgate.compare.cli", "candidate vs the registry's champion: metrics, churn, slices"),
    "estimate": ("skewgate.estimate.cli", "label-free accuracy estimate on serving data (CBPE), with an interval"),
    "promote": ("skewgate.promote.cli", "fail-closed registry promotion from signed verdicts"),
    "verify": ("skewgate.verify.cli", "re-check a champion's signed evidence from the registry alone"),
    "keys": ("skewgate.keys.cli", "generate the Ed25519 key pair that signs and checks verdicts"),
    "pipeline": ("skewgate.pipelines.cli", "compile, run locally, submit or schedule the pipelines"),
    "demo": ("skewgate.demo.run", "train the digits CNN and gate a good and a defective candidate"),
}


EXAMPLE = """
    skewgate keys generate --out keys/
    skewgate export --model model.pt2 --inputs examples.npz --out model.onnx --report verdicts/export.json \\
        --signing-key keys/skewgate.key
    skewgate promote --model-name digits-cnn --onnx model.onnx --verdicts verdicts/ --require export \\
        --trusted-key keys/skewgate.pub
    skewgate COMMAND --help
"""


def build_parser() -> argparse.ArgumentParser:
    """`skewgate`'s own parser: the command and --version (each command parses the rest)."""
    from skewgate.common.cli_support import describe

    parser = argparse.ArgumentParser(prog="skewgate")
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items())
    describe(parser, f"{__doc__}\n\ncommands:\n{commands}", example=EXAMPLE)
    parser.add_argument("--version", action="version", version=f"skewgate {__version__}",
                        help="print the version and exit")
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND",
                        help="the step or tool to run (listed above); `skewgate COMMAND --help` says more")
    return parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """`skewgate COMMAND`'s parser, built: what its `--help` prints (subcommands included)."""
    module = importlib.import_module(COMMANDS[command][0])
    parser: argparse.ArgumentParser = module.build_parser(argparse.ArgumentParser(prog=f"skewgate {command}"))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:2] == ["parity", "preprocess"]:  # the spelling before preprocess was a step of its own
        print("skewgate: `parity preprocess` is now `skewgate preprocess`", file=sys.stderr)
        argv = argv[1:]
    if not argv:
        parser.print_usage(sys.stderr)
        print(f"skewgate: error: no COMMAND given: one of {', '.join(COMMANDS)} (skewgate --help says what each "
              "does)", file=sys.stderr)
        return 2
    if argv[0] not in COMMANDS:
        parser.parse_args(argv[:1])  # --help, --version, or argparse's error naming the valid commands (exit 2)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    sub = argparse.ArgumentParser(prog=f"skewgate {argv[0]}")
    try:
        return int(module.main(argv[1:], sub))
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM (`raise_on_sigterm`): one line, the shell's exit codes
        terminated = isinstance(err, Terminated)
        print(f"skewgate {argv[0]}: interrupted ({'SIGTERM' if terminated else 'SIGINT'})", file=sys.stderr)
        return 143 if terminated else 130
    except SkewgateError as err:
        # A mistake in the setup found before any evaluation (a tracking URI MLflow would misread, an unknown
        # required step): one line, and the traceback only with -v (the command's debug logging).
        logging.getLogger("skewgate").debug("skewgate %s could not start", argv[0], exc_info=True)
        print(f"skewgate {argv[0]}: {err}", file=sys.stderr)
        return 2


def entry() -> NoReturn:
    """The `skewgate` console script: run the command (SIGTERM interrupting it as Ctrl-C does), then `leave`."""
    raise_on_sigterm()
    leave(main())


def leave(code: int) -> NoReturn:
    """Exit once the work is written, without tearing the interpreter down.

    A process that has loaded torch and ONNX Runtime spends most of a second (several under load) in
    finalisation after its last line — module teardown, thread pools — for nothing: by then every verdict,
    report and MLflow call is complete. Exit handlers still run, running threads are joined and output is
    flushed, exactly as at a normal exit; only the teardown is skipped."""
    # What a normal exit does first: stop thread pools (concurrent.futures' exit hook), then join the threads
    # that are not daemons. Joining before the pools are told to stop would wait forever on idle workers.
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
