"""What every step's CLI shares: common flags, logging to stderr, the MLflow step run, the report file, the
human summary, and the exit code (0 pass/warn, 1 gate failed, 2 could not evaluate)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from skewgate.common.errors import SkewgateError
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

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


@contextlib.contextmanager
def _step_run(step: str, args: argparse.Namespace) -> Iterator[StepRun | None]:
    if not args.tracking_uri:
        yield None
        return
    from skewgate.common import mlflow_log

    tracking = mlflow_log.connect(args.tracking_uri, experiment=args.experiment, deadline_s=args.mlflow_deadline)
    with tracking.step_run(step, pipeline_run_id=args.pipeline_run_id or None) as run:
        yield run


def run_step(step: str, args: argparse.Namespace, evaluate: Callable[[StepRun | None], Verdict]) -> int:
    """Evaluate inside an MLflow step run (when tracking is configured); always write the report."""
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    verdict: Verdict | None = None
    try:
        with _step_run(step, args) as run:
            try:
                verdict = evaluate(run)
            except SkewgateError as err:
                verdict = Verdict.error(step, str(err))
            except Exception as err:  # a bug or an unexpected library error: still "could not evaluate"
                log.debug("unexpected error", exc_info=True)
                verdict = Verdict.error(step, f"{type(err).__name__}: {err}")
            if run is not None:
                run.log_verdict(verdict)
    except SkewgateError as err:  # MLflow unreachable or failing: the step's answer could not be recorded
        prior = f"{verdict.message}; " if verdict is not None and verdict.status == "error" else ""
        verdict = Verdict.error(step, f"{prior}{err}")
    assert verdict is not None
    if args.report:
        verdict.write(args.report)
    text = summary(verdict)
    print(text.splitlines()[0] if args.quiet else text, file=sys.stderr)
    return exit_code(verdict)


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
