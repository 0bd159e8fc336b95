"""What every step's report shares: the HTML page around a verdict, and writing the pictures and pages where
asked, then (with tracking) logging them and the step's tables to its MLflow run. The CLIs and the KFP
components of drift, parity and calibrate all publish through `publish`."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common.verdict import Verdict

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

# (where to write it — nothing when empty —, the name it gets in MLflow, the function that writes it)
Output = tuple["str | Path | None", str, Callable[[Path], Any]]


def html_page(verdict: Verdict, body: str, *, cell_align: str = "left") -> str:
    """A self-contained page for the KFP UI: the status, the message, each check, then `body`."""
    checks = "".join(f"<li><b>{html.escape(c.name)}</b>: {'ok' if c.passed else c.severity.upper()} — "
                     f"{html.escape(c.detail)}</li>" for c in verdict.checks)
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>skewgate {html.escape(verdict.step)}</title><style>body{{font-family:sans-serif}}"
            f"td,th{{padding:2px 6px;font-size:12px;text-align:{cell_align}}}</style></head><body>"
            f"<h1>{html.escape(verdict.step)}: {verdict.status.upper()}</h1><p>{html.escape(verdict.message)}</p>"
            f"<ul>{checks}</ul>{body}</body></html>")


def publish(run: StepRun | None, *, outputs: Sequence[Output], tables: Mapping[str, list[dict[str, Any]]]) -> None:
    """Write each output that has a path; with tracking, log the tables and the written outputs by name."""
    written = []
    for path, name, write in outputs:
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write(Path(path))
            written.append((path, name or Path(path).name))
    if run is not None:
        for artifact_file, rows in tables.items():
            run.log_table(artifact_file, rows)
        for path, name in written:
            run.log_artifact_as(path, name)


def pyplot() -> Any:
    """matplotlib's pyplot for files (no display). Mathtext stays on, so that log axes label their ticks 10⁵ and
    not `$\\mathdefault{10^{5}}$`; every user-chosen string (feature, tensor, module names) goes through `plain`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain(text: object) -> str:
    """`text` as matplotlib must be given it to print it as written: a `$` in a feature, tensor or module name
    prints as a `$` instead of starting a formula (where `x_1` would lose its underscore, or the plot crash).

    Only `$` needs escaping: without an unescaped `$` matplotlib never parses mathtext, and it turns each `\\$`
    back into `$`, so a backslash already in the name (`a\\$b` included) prints unchanged."""
    return str(text).replace("$", r"\$")


def write_text(text: Callable[[], str]) -> Callable[[Path], Any]:
    return lambda path: path.write_text(text(), encoding="utf-8")
