"""Pictures of drift: the coverage heatmap (PNG for MLflow) and an HTML report for the KFP UI."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from skewgate.common.publishing import html_page, pyplot
from skewgate.drift.core import DriftResult

BINS = ["<min", *[f"D{i}" for i in range(1, 11)], ">max", "NaN"]
MAX_FEATURES = 40  # more rows than this stop being readable; the full table is in the verdict and MLflow


def _ordered(result: DriftResult) -> list[tuple[str, np.ndarray, bool]]:
    """Numeric features with their coverage rows, drifted first, then by effect (the table's order)."""
    names = list(result.profile.numeric_names)
    rows = []
    for entry in result.features:
        if entry["kind"] == "numeric":
            rows.append((entry["feature"], result.coverage[names.index(entry["feature"])], entry["drifted"]))
    return rows[:MAX_FEATURES]


def heatmap_png(result: DriftResult, path: str | Path) -> Path:
    plt = pyplot()

    rows = _ordered(result)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    matrix = np.array([r[1] for r in rows]) if rows else np.zeros((1, len(BINS)))
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * max(len(rows), 1)))
    image = ax.imshow(matrix, aspect="auto", cmap="magma_r", vmin=0, vmax=max(0.3, float(matrix.max())))
    ax.set_xticks(range(len(BINS)), BINS, fontsize=8)
    ax.set_yticks(range(len(rows)), [f"{'● ' if r[2] else ''}{r[0]}" for r in rows], fontsize=7)
    ax.set_title(f"Share of current rows per reference decile (0.10 each when nothing drifted) — "
                 f"{result.verdict.status.upper()}", fontsize=9)
    fig.colorbar(image, ax=ax, label="share of current rows")
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")  # explicit: KFP output paths have no suffix
    plt.close(fig)
    return path


def report_html(result: DriftResult) -> str:
    verdict = result.verdict
    rows = _ordered(result)
    cells = []
    for name, shares, drifted in rows:
        tds = "".join(f'<td style="background:rgba(200,30,30,{min(1.0, abs(s - 0.1) * 4):.2f})">{s:.2f}</td>'
                      for s in shares)
        cells.append(f"<tr><th>{'● ' if drifted else ''}{html.escape(name)}</th>{tds}</tr>")
    table = [f"<tr><td>{html.escape(str(r['feature']))}</td><td>{r['test']}</td><td>{_fmt(r['statistic'])}</td>"
             f"<td>{_fmt(r['pvalue'])}</td><td>{_fmt(r['adjusted_pvalue'])}</td><td>{'yes' if r['drifted'] else ''}"
             f"</td></tr>" for r in result.features[:200]]
    return html_page(verdict, (
        "<h2>Coverage of the reference deciles (redder = further from 0.10)</h2><table><tr><th></th>"
        + "".join(f"<th>{b}</th>" for b in BINS) + "</tr>" + "".join(cells) + "</table>"
        "<h2>Per-feature tests</h2><table><tr><th>feature</th><th>test</th><th>statistic</th><th>p</th>"
        "<th>adjusted p</th><th>drifted</th></tr>" + "".join(table) + "</table>"), cell_align="right")


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
