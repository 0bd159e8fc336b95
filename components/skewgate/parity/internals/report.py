"""Pictures of parity: per-layer error against depth (PNG for MLflow) and an HTML report for the KFP UI."""

from __future__ import annotations

import html
import textwrap
from pathlib import Path
from typing import Any

from skewgate.common.publishing import html_page, plain, pyplot
from skewgate.parity.core import FP32, INT8, ParityResult

FP16 = "fp32_vs_fp16"


def layer_plot(result: ParityResult, path: str | Path) -> Path:
    """One panel per compared pair: max |error| / tolerance (FP32) or SQNR in dB (INT8, FP16), against depth."""
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = layer_figure(result)
    try:
        fig.savefig(path, dpi=110, format="png")  # explicit: KFP output paths have no suffix
    finally:
        plt.close(fig)
    return path


TITLES = {FP32: "PyTorch vs ONNX Runtime FP32", INT8: "ONNX Runtime FP32 vs INT8", FP16: "FP32 vs FP16"}


def layer_figure(result: ParityResult) -> Any:
    """`layer_plot`'s figure (a matplotlib Figure, not yet closed). No text is drawn over the points: the first
    divergence is named in its panel's title and marked by a line, and the markers and lines have a legend."""
    from matplotlib.lines import Line2D

    plt = pyplot()
    pairs: list[str | None] = [p for p in (FP32, INT8, FP16) if result.layers.get(p)]  # None: no panel
    fig, axes = plt.subplots(len(pairs) or 1, 1, figsize=(10, 3.6 * max(len(pairs), 1)), squeeze=False)
    for ax, pair in zip(axes[:, 0], pairs or [None], strict=True):
        if pair is None:
            ax.text(0.5, 0.5, "no layerwise comparison (run with --layerwise)", ha="center", va="center")
            ax.set_axis_off()
            continue
        rows = result.layers[pair]
        metric = "worst_ratio" if pair == FP32 else "sqnr_db"
        ys = [r[metric] if r[metric] is not None else (0.0 if pair == FP32 else 120.0) for r in rows]
        colours = ["tab:red" if r["diverged"] else "tab:blue" for r in rows]
        ax.scatter(range(len(rows)), ys, c=colours, s=18)
        ax.plot(range(len(rows)), ys, color="lightgray", zorder=0)
        handles = [Line2D([], [], marker="o", linestyle="", color=c, label=label)
                   for c, label in (("tab:blue", "within its limit"), ("tab:red", "diverged"))]
        if pair == FP32:
            ax.set_yscale("symlog", linthresh=1e-3)
            handles.append(ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1,
                                      label="tolerance (ratio 1)"))
            ax.set_ylabel("max |error| / tolerance")
        else:
            ax.set_ylabel("SQNR (dB)")
        title = TITLES[pair]
        first = (result.verdict.details.get(pair) or {}).get("first_divergence" if pair != FP16 else "first_failure")
        if first:  # named in the title and marked by a line: a note drawn in the panel would hide the points
            index = next((i for i, r in enumerate(rows) if r["value"] == first["value"]), 0)
            handles.append(ax.axvline(index, color="tab:red", linestyle=":", linewidth=1.2,
                                      label="first divergence"))
            title += "\n" + textwrap.shorten(f"first divergence: {_module(first)}, ONNX {first['op']}", 110)
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.3)
        ax.set_xticks(range(len(rows)), [plain(f"{r['module']}:{r['op']}") for r in rows], rotation=70,
                      fontsize=6)
        ax.set_xlabel("compared value in graph order (module:ONNX op)", fontsize=8)
        ax.set_xlim(-0.5, len(rows) - 0.5)
        ax.set_title(plain(title), fontsize=9)
    fig.suptitle(f"parity: {result.verdict.status.upper()}", fontsize=10)
    fig.tight_layout()
    return fig


def report_html(result: ParityResult) -> str:
    """A table per compared pair, with only the columns that judge it: FP32 rows by max |error| against the
    tolerance (err/tol ≤ 1), INT8 and FP16 rows by SQNR (an FP32 tolerance means nothing for them)."""
    tables = []
    for pair, rows in result.layers.items():
        by_tolerance = pair == FP32
        judged = ("err/tol", "worst_ratio") if by_tolerance else ("SQNR dB", "sqnr_db")
        rule = ("judged by max |error| / tolerance: a value diverges above 1" if by_tolerance else
                "judged by SQNR against its floor (the error of FP32's own rounding is not the limit here)")
        body = "".join(
            f"<tr style='{'background:#fdd' if r['diverged'] else ''}'><td>{r['depth']}</td>"
            f"<td>{html.escape(r['value'])}</td><td>{html.escape(_module(r))}</td><td>{r['op']}</td>"
            f"<td>{_fmt(r['max_abs'])}</td><td>{_fmt(r[judged[1]])}</td></tr>"
            for r in rows)
        tables.append(f"<h2>{html.escape(TITLES.get(pair, pair))} ({pair})</h2><p>{html.escape(rule)}</p>"
                      f"<table><tr><th>depth</th><th>value</th><th>module</th><th>op</th><th>max |err|</th>"
                      f"<th>{judged[0]}</th></tr>{body}</table>")
    return html_page(result.verdict, "".join(tables))


def _module(row: dict[str, Any]) -> str:
    """`features.1 (BatchNorm2d)`: the module that made the value, and its class where known."""
    return f"{row['module']} ({row['module_type']})" if row.get("module_type") else row["module"]


def _fmt(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"
