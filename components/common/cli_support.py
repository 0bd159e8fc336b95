"""What every step's CLI shares: common flags, logging to stderr, the MLflow step run, the report file, the
human summary, and the exit code (0 pass/warn, 1 gate failed, 2 could not evaluate)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from skewgate.common.recording import Evaluate, TrackingOptions, evaluate_and_record, sign_verdict
from skewgate.common.verdict import Verdict

EXIT_OK, EXIT_GATE_FAILED, EXIT_ERROR = 0, 1, 2
log = logging.getLogger("skewgate")


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--report", type=Path, help="write the verdict JSON here")
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI", ""),
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI; empty: do not log)")
    parser.add_argument("--experiment", default=os.environ.get("SKEWGATE_EXPERIMENT", "skewgate"),
                        help="MLflow experiment, one per registered model (default: $SKEWGATE_EXPERIMENT "
                             "or 'skewgate')")
    parser.add_argument("--pipeline-run-id", default=os.environ.get("SKEWGATE_PIPELINE_RUN_ID", ""),
                        help="groups step runs under one parent run (default: $SKEWGATE_PIPELINE_RUN_ID)")
    parser.add_argument("--mlflow-deadline", type=float, default=30.0, metavar="SECONDS",
                        help="give up on an unreachable MLflow after this long (default: 30)")
    parser.add_argument("--signing-key", default="", metavar="PATH",
                        help="Ed25519 private key to sign the verdict with (default: $SKEWGATE_SIGNING_KEY); the "
                             "DSSE envelope is written beside --report as <stem>.intoto.jsonl")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")


def configure_logging(*, quiet: bool = False, verbose: bool = False) -> None:
    level = logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # third-party chatter (onnxscript, torch.onnx) stays out of the way
    log.setLevel(level)
    for noisy in ("torch.onnx", "onnxscript", "onnx_ir", "mlflow", "alembic"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def tracking_options(args: argparse.Namespace) -> TrackingOptions:
    """The common flags as `TrackingOptions` (and stderr logging configured as they ask)."""
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    return TrackingOptions(uri=args.tracking_uri, experiment=args.experiment, pipeline_run_id=args.pipeline_run_id,
                           deadline_s=args.mlflow_deadline, signing_key=args.signing_key)


def finish_cli(verdict: Verdict, args: argparse.Namespace) -> None:
    """Write the report (and its envelope) when asked, and the human summary to stderr."""
    if args.report:
        write_report(verdict, args.report, signing_key=args.signing_key)
    text = summary(verdict)
    print(text.splitlines()[0] if args.quiet else text, file=sys.stderr)


def run_step(step: str, args: argparse.Namespace, evaluate: Evaluate) -> int:
    """Evaluate inside an MLflow step run (when tracking is configured); always write the report."""
    verdict = evaluate_and_record(step, evaluate, tracking_options(args))
    finish_cli(verdict, args)
    return exit_code(verdict)


def write_report(verdict: Verdict, path: Path, *, signing_key: str = "") -> None:
    """The verdict JSON, and its signed envelope beside it when a key is configured (a stale envelope from an
    earlier run is removed, so an unsigned report is never mistaken for a signed one)."""
    from skewgate.common import attest

    verdict.write(path)
    target = attest.envelope_path(path)
    envelope = sign_verdict(verdict, signing_key)
    if envelope is None:
        target.unlink(missing_ok=True)
    else:
        attest.write_envelope(envelope, target)


def exit_code(verdict: Verdict) -> int:
    return {"pass": EXIT_OK, "warn": EXIT_OK, "fail": EXIT_GATE_FAILED}.get(verdict.status, EXIT_ERROR)


def summary(verdict: Verdict) -> str:
    """A short human table: status first, then each check (failed ones marked)."""
    lines = [f"{verdict.step}: {verdict.status.upper()} — {verdict.message}"]
    width = max((len(c.name) for c in verdict.checks), default=0)
    for check in verdict.checks:
        mark = "ok  " if check.passed else ("WARN" if check.severity == "warn" else "FAIL")
        value = "" if check.value is None else f"{check.value:.4g}"
        limit = "" if check.limit is None else f" (limit {check.limit:.4g})"
        lines.append(f"  {mark} {check.name:<{width}} {value}{limit}  {check.detail}")
    return "\n".join(lines)
