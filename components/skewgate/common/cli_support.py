"""What every step's CLI shares: common flags, logging to stderr, the tracking options they give the step's
`run` (which records its verdict), the report file, the human summary, and the exit code (0 pass/warn, 1 gate
failed, 2 could not evaluate)."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from skewgate.common.errors import InputError
from skewgate.common.recording import StepResult, TrackingOptions
from skewgate.common.steps import RELEASE_GATE_STEPS
from skewgate.common.verdict import Verdict

EXIT_OK, EXIT_GATE_FAILED, EXIT_ERROR = 0, 1, 2
log = logging.getLogger("skewgate")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """`--help` text: each paragraph of the description and epilog wrapped to the terminal, except paragraphs with
    indented lines (the examples), printed as written so that they can be copied."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in textwrap.dedent(text).strip().split("\n\n"):
            if any(line.startswith(" ") for line in paragraph.splitlines()):
                paragraphs.append("\n".join(indent + line for line in paragraph.splitlines()))
            else:
                paragraphs.append(textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent,
                                                subsequent_indent=indent))
        return "\n\n".join(paragraphs)


def describe(parser: argparse.ArgumentParser, description: str | None, *, example: str) -> argparse.ArgumentParser:
    """Give a command its description and the example that ends its `--help` (`example`: command lines, as
    typed; `\\`-continued lines indented)."""
    if description is not None:
        parser.description = description
    lines = textwrap.dedent(example).strip().splitlines()
    parser.epilog = "example:\n" + "\n".join(f"  {line}" for line in lines)
    parser.formatter_class = HelpFormatter
    return parser


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


def add_output_task_args(group: argparse._ActionsContainer, defaults: Any) -> None:
    """How a candidate's outputs are judged against the reference's (common/output_tasks.py): the same flags,
    defaults from the step's options, wherever a step judges INT8."""
    from skewgate.common.output_tasks import TASKS

    group.add_argument("--task", choices=TASKS, default=defaults.task,
                       help="what the outputs are (default: %(default)s, read from each output's shape and values)")
    group.add_argument("--class-axis", type=int, default=defaults.class_axis, metavar="AXIS",
                       help="the class axis of a classification or segmentation output (default: from the labels' "
                            "shape, else axis 1 of a rank-4 output, else the last)")
    group.add_argument("--output-task", action="append", default=[], metavar="NAME=TASK[:AXIS]",
                       help="one output's own task where a model has several (repeat per output, e.g. "
                            "--output-task boxes=regression); the others are judged as --task says")
    group.add_argument("--min-top1-agreement", type=float, default=defaults.min_top1_agreement,
                       metavar="SHARE", help="the candidate keeps at least this share of positions unharmed: the "
                       "argmax of a sample or pixel, an embedding's cosine, a regressor's error (default: "
                       "%(default)s)")
    group.add_argument("--min-cosine-similarity", type=float, default=defaults.min_cosine_similarity,
                       help="embedding: a sample below this cosine to the reference is harmed (default: %(default)s)")
    group.add_argument("--max-regression-error", type=float, default=defaults.max_regression_error,
                       help="regression: a value moved by more than this share of its column's spread is harmed "
                            "(default: %(default)s)")


def output_task_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options `add_output_task_args` set, by their options' names."""
    from skewgate.common.output_tasks import parse_output_tasks

    return {"task": args.task, "class_axis": args.class_axis, "output_tasks": parse_output_tasks(args.output_task),
            "min_top1_agreement": args.min_top1_agreement,
            "min_cosine_similarity": args.min_cosine_similarity, "max_regression_error": args.max_regression_error}


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
    """The common flags as `TrackingOptions` (and stderr logging configured as they ask). A tracking URI MLflow
    would misread is an `InputError` here, before anything is evaluated (see `check_tracking_uri`)."""
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    return TrackingOptions(uri=check_tracking_uri(args.tracking_uri), experiment=args.experiment,
                           pipeline_run_id=args.pipeline_run_id, deadline_s=args.mlflow_deadline,
                           signing_key=args.signing_key)


_SQLITE_EXAMPLE = "sqlite:////abs/path/mlflow.db"
_DATABASE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
# The schemes MLflow resolves itself (a plugin may add more; those are left for MLflow to judge).
_SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "file", "databricks", "databricks-uc", "uc")
_HOST_PORT = re.compile(r"[A-Za-z0-9.-]+:[0-9]+(/.*)?")


def check_tracking_uri(uri: str, *, flag: str = "--tracking-uri") -> str:
    """`uri`, when MLflow will read it as the store the user means; else an `InputError` in one line that says
    what to write instead. Empty stays empty (nothing is logged).

    Accepted: `sqlite:///relative/path.db` and `sqlite:////abs/path.db` (three slashes, then the path),
    `http(s)://HOST[:PORT]`, the other databases MLflow takes (`postgresql://…`, `mysql+pymysql://…`),
    `databricks`, and MLflow's file store (`file:…` or a folder) only where this MLflow still accepts it. Refused:
    a bare path to a database file, `sqlite://` with two slashes (SQLAlchemy reads the first folder as a host),
    `HOST:PORT` without a scheme, a misspelt scheme, and a local store (database file or folder) that does not
    exist: MLflow would create an empty one and answer from it (`mlflow_log.require_store`)."""
    if not uri or uri in ("databricks", "databricks-uc"):  # MLflow's names for the Databricks workspace
        return uri
    if uri == os.environ.get("MLFLOW_TRACKING_URI"):
        flag = f"{flag} (from $MLFLOW_TRACKING_URI)"

    def refuse(found: str, expected: str = f"a URI such as {_SQLITE_EXAMPLE}") -> InputError:
        return InputError(flag, expected=expected, found=found)

    if _HOST_PORT.fullmatch(uri):
        raise refuse(f"{uri!r} without a scheme; write http://{uri}",
                     expected="a URI such as http://HOST:PORT or " + _SQLITE_EXAMPLE)
    parts = urlsplit(uri)
    scheme = parts.scheme.lower() if len(parts.scheme) > 1 else ""  # C:\… is a Windows path, not a scheme
    if not scheme:
        if uri.lower().endswith(_DATABASE_SUFFIXES):
            raise refuse(f"a bare path {uri!r}; write sqlite:///{uri}")
        return _check_file_store(uri, refuse=refuse)
    if scheme == "sqlite":
        after = uri[len("sqlite:"):]
        if not after.startswith("///"):
            rest = after.lstrip("/")
            slashes = len(after) - len(rest)
            if not rest:
                raise refuse(f"{uri!r}, an in-memory store that is gone when this command ends")
            raise refuse(f"{uri!r} with {slashes} slash{'es' if slashes != 1 else ''} after 'sqlite:'; write "
                         f"sqlite:///{rest} for the relative path {rest!r} or sqlite:////{rest} for '/{rest}'")
        return _existing(uri, refuse)
    if scheme in ("http", "https"):
        if not parts.netloc:
            raise refuse(f"{uri!r} without a host", expected=f"{scheme}://HOST[:PORT]")
        return uri
    if scheme == "file":
        return _check_file_store(uri, refuse=refuse)
    if scheme.split("+", 1)[0] not in _SCHEMES:
        close = difflib.get_close_matches(scheme, _SCHEMES, n=1, cutoff=0.75)
        if close:
            raise refuse(f"the unknown scheme {scheme!r} in {uri!r}; did you mean {close[0]}:?",
                         expected=f"a URI such as http://HOST:PORT or {_SQLITE_EXAMPLE}")
    return uri


def _check_file_store(uri: str, *, refuse: Callable[..., InputError]) -> str:
    """MLflow's file store (a folder): refused where this MLflow refuses it (3.x without the opt-in), and when the
    folder does not exist."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow from before the file store's maintenance mode (or none): MLflow judges
        allowed = True
    else:
        allowed = bool(MLFLOW_ALLOW_FILE_STORE.get())
    if not allowed:
        raise refuse(f"MLflow's file store {uri!r}, which this MLflow accepts only with MLFLOW_ALLOW_FILE_STORE=true",
                     expected=f"a database or server URI such as {_SQLITE_EXAMPLE} or http://HOST:PORT")
    return _existing(uri, refuse)


def _existing(uri: str, refuse: Callable[..., InputError]) -> str:
    """`uri`, when the local store it names exists; the refusal names the flag otherwise."""
    from skewgate.common.mlflow_log import require_store

    try:
        require_store(uri)
    except InputError as err:
        raise refuse(err.found, expected=err.expected) from err
    return uri


def finish_cli(result: StepResult, args: argparse.Namespace) -> int:
    """Write the report (and its envelope) when asked and the human summary to stderr; the exit code."""
    if args.report:
        write_report(result, args.report)
    text = summary(result.verdict)
    print(text.splitlines()[0] if args.quiet else text, file=sys.stderr)
    verdict = result.verdict
    if result.envelope is None and verdict.step in RELEASE_GATE_STEPS and verdict.status != "error" \
            and verdict.subject is not None:  # evidence promote will read: say now that it will not count
        from skewgate.common.attest import SIGNING_KEY_ENV

        print(f"skewgate {verdict.step}: the verdict is not signed (no --signing-key, ${SIGNING_KEY_ENV} unset): "
              "promote refuses it as evidence unless --allow-unsigned", file=sys.stderr)
    return exit_code(verdict)


def write_report(result: StepResult, path: Path) -> None:
    """The verdict JSON, and its signed envelope beside it when it has one (a stale envelope from an earlier run
    is removed, so an unsigned report is never mistaken for a signed one)."""
    from skewgate.common import attest

    result.verdict.write(path)
    target = attest.envelope_path(path)
    if result.envelope is None:
        target.unlink(missing_ok=True)
    else:
        attest.write_envelope(result.envelope, target)


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
