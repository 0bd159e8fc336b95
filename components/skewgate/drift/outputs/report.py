"""Pictures of drift: the coverage heatmap (PNG for MLflow) and an HTML report for the KFP UI."""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.publishing import html_page, plain, pyplot
from skewgate.drift.core import DriftResult
from skewgate.drift.stats.profile import ReferenceProfile

BINS = ["<min", *[f"D{i}" for i in range(1, 11)], ">max", "NaN"]
MAX_FEATURES = 40  # more rows than this stop being readable; the full table is in the verdict and MLflow
FULL_SHADE = 0.10  # a cell this far (in share) from the reference's share of it is full red
ALARM = 0.05  # and from this far it is outlined: five points of a feature's values moved in or out of one bin …
NOISE_SDS = 4.0  # … and more than this many standard deviations of the two samples' shares (small samples wander)


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
    # tall enough for the colour bar's label beside a single row
    fig, ax = plt.subplots(figsize=(9, max(2.4, 1.2 + 0.28 * len(rows))))
    image = ax.imshow(matrix, aspect="auto", cmap="magma_r", vmin=0, vmax=max(0.3, float(matrix.max())))
    ax.set_xticks(range(len(BINS)), BINS, fontsize=8)
    ax.set_yticks(range(len(rows)), [plain(f"{'● ' if r[2] else ''}{r[0]}") for r in rows], fontsize=7)
    ax.set_title(f"Share of current rows per reference decile (0.10 each when nothing drifted) — "
                 f"{result.verdict.status.upper()}", fontsize=9)
    fig.colorbar(image, ax=ax).set_label("share of current rows", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")  # explicit: KFP output paths have no suffix
    plt.close(fig)
    return path


def reference_shares(profile: ReferenceProfile) -> np.ndarray:
    """Per numeric feature, the reference's own share of each coverage bin (features × 13, the bins of `BINS`),
    as the current shares are counted: none below the minimum or above the maximum, each decile its share of the
    reference values (from the sketch: ties make some deciles empty and others hold more than 0.10), the NaN share.
    NaN for a feature whose reference has no values (no edges to bin by)."""
    shares = np.full((len(profile.numeric_names), len(BINS)), np.nan)
    for j, (name, sketch, edges) in enumerate(zip(profile.numeric_names, profile.sketches, profile.edges,
                                                  strict=True)):
        nan = float(profile.nan_share.get(name, 0.0))
        shares[j, 12] = nan
        if sketch.n == 0 or np.isnan(edges).any():
            continue
        # #{x < edge}: the rank bounds just below each inner edge, their midpoint (exact for an exact sketch)
        below, above = sketch.cell_bounds(np.nextafter(edges[1:-1], -np.inf))
        cdf = np.concatenate([[0.0], np.clip((below + above) / 2.0 / sketch.n, 0.0, 1.0), [1.0]])
        shares[j, 0] = shares[j, 11] = 0.0
        shares[j, 1:11] = np.diff(np.maximum.accumulate(cdf)) * (1.0 - nan)
    return shares


def _cell(current: float, reference: float, rows: tuple[int, int] = (0, 0)) -> str:
    """A coverage cell: the current share, shaded by how far it departs from the reference's share of that cell,
    outlined when that is both material (`ALARM`) and beyond sampling noise over `rows` (reference, current; 0 =
    not known); a cell empty on both sides, or with no reference to compare with, stays neutral."""
    if not (np.isfinite(reference) and np.isfinite(current)):
        text = f"{current:.2f}" if np.isfinite(current) else ""
        return f'<td class="none" style="color:#999" title="no reference share">{text}</td>'
    title = f"current {current:.3f} · reference {reference:.3f}"
    if current == 0 and reference == 0:
        return f'<td class="empty" style="color:#999" title="{title}">·</td>'
    departure = abs(current - reference)
    shade = f"background:rgba(200,30,30,{min(1.0, departure / FULL_SHADE):.2f})"
    pooled = (current + reference) / 2
    noise = NOISE_SDS * np.sqrt(pooled * (1 - pooled) * sum(1 / n for n in rows if n > 0))
    marker = ""
    if departure >= max(ALARM, noise):
        shade, marker = f"{shade};outline:2px solid #a00;outline-offset:-2px", ' class="alarm"'
    return f'<td{marker} style="{shade}" title="{title}">{current:.2f}</td>'


def report_html(result: DriftResult) -> str:
    verdict = result.verdict
    rows = _ordered(result)
    expected = reference_shares(result.profile)
    names = list(result.profile.numeric_names)
    sides = (result.details.rows.reference, result.details.rows.current)
    cells = []
    for name, shares, drifted in rows:
        reference = expected[names.index(name)]
        tds = "".join(_cell(float(s), float(r), sides) for s, r in zip(shares, reference, strict=True))
        cells.append(f"<tr><th>{'● ' if drifted else ''}{html.escape(name)}</th>{tds}</tr>")
    table = [f"<tr><td>{html.escape(str(r['feature']))}</td><td>{html.escape(str(r['test']))}</td>"
             f"<td>{_fmt(r['statistic'])}</td><td>{html.escape(_p(r))}</td><td>{_fmt(r['adjusted_pvalue'])}</td>"
             f"<td>{'yes' if r['drifted'] else ''}</td></tr>" for r in result.features[:200]]
    return html_page(verdict, (
        "<h2>Share of current values per reference bin</h2>"
        f"<p>Redder = further from the reference's own share of that bin (full red at {FULL_SHADE:.2f} away); "
        f"outlined = at least {ALARM:.2f} away and beyond sampling noise; · = empty in both. Hover a cell for both "
        "shares.</p>"
        "<table><tr><th></th>" + "".join(f"<th>{html.escape(b)}</th>" for b in BINS) + "</tr>" + "".join(cells)
        + "</table><h2>Per-feature tests</h2><table><tr><th>feature</th><th>test</th><th>statistic</th><th>p</th>"
        "<th>adjusted p</th><th>drifted</th></tr>" + "".join(table) + "</table>"), cell_align="right")


def _p(row: Mapping[str, Any]) -> str:
    """A feature's p-value as read: why it was not testable, or its exponent where it lies below the floor."""
    if "untestable" in row:
        return f"not testable: {row['untestable']}"
    if row.get("log10_pvalue") is not None:
        return f"≈ 1e{row['log10_pvalue']:.0f}"
    return _fmt(row["pvalue"])


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"
