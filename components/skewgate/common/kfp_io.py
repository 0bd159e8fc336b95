"""Verdict → KFP outputs: the verdict artifact, `dsl.Metrics` (one per check) and a Markdown report.

Called from inside component functions, where the artifacts are the live `dsl.Output[...]` objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skewgate.common.markdown import cell, escape
from skewgate.common.mlflow_conventions import check_metrics
from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.recording import StepResult


def to_markdown(verdict: Verdict) -> str:
    """The report shown in the KFP UI: status, message, a table of checks, the judged artifact. Every string
    that a model, a data set or a user chose (names, messages, paths) is escaped: it is text, never markup."""
    icon = {"pass": "✅", "warn": "⚠️", "fail": "❌", "error": "💥"}[verdict.status]
    lines = [f"# {escape(verdict.step)}: {icon} {verdict.status.upper()}", "", escape(verdict.message), ""]
    if verdict.checks:
        lines += ["| check | passed | value | limit | detail |", "|---|---|---|---|---|"]
        for c in verdict.checks:
            value = "" if c.value is None else f"{c.value:.4g}"
            limit = "" if c.limit is None else f"{c.limit:.4g}"
            lines.append(f"| {cell(c.name)} | {'yes' if c.passed else '**no**'} | {value} | {limit} "
                         f"| {cell(c.detail)} |")
    if verdict.subject is not None:
        lines += ["", f"Artifact: {escape(verdict.subject.artifact)} sha256 `{verdict.subject.sha256}`"]
    return "\n".join(lines) + "\n"


def finish(result: StepResult, *, verdict_artifact: Any, metrics: Any, report: Any, attestation: Any = None) -> str:
    """Write the KFP outputs and return the status string the DAG branches on.

    `attestation` receives the verdict's signed DSSE envelope when it has one (`$SKEWGATE_SIGNING_KEY` set), else
    `{}` (which promote reads as unsigned).

    Status `error` (could not evaluate) raises after writing, so the task fails and nothing downstream (above
    all promote) runs: the registry stays as it was.
    """
    verdict = result.verdict
    verdict.write(verdict_artifact.path)
    if attestation is not None:
        from skewgate.common import attest

        attest.write_envelope(result.envelope or {}, attestation.path)
    verdict_artifact.metadata.update({"step": verdict.step, "status": verdict.status})
    if verdict.subject is not None:
        verdict_artifact.metadata["sha256"] = verdict.subject.sha256
    for name, value in check_metrics(verdict).items():  # as the MLflow step run's: `.passed` is 1 for a pass
        metrics.log_metric(name, value)
    metrics.log_metric("passed", float(verdict.status in {"pass", "warn"}))
    with open(report.path, "w", encoding="utf-8") as handle:
        handle.write(to_markdown(verdict))
    if verdict.status == "error":
        raise RuntimeError(f"{verdict.step} could not evaluate: {verdict.message}")
    return verdict.status
