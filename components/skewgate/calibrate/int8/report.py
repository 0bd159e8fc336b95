"""Pictures of calibration: histograms with the chosen range for the flagged tensors (or the widest ones),
per-layer SQNR, and an HTML report for the KFP UI."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from skewgate.common.publishing import html_page, plain, pyplot

if TYPE_CHECKING:
    from skewgate.calibrate.core import CalibrationResult

PANELS = 6


def histogram_plot(result: CalibrationResult, path: str | Path) -> Path:
    """One panel per tensor (flagged first): calibration histogram (log counts) and the chosen clip range."""
    plt = pyplot()

    rows = sorted(result.tensors, key=lambda t: (not t["outlier"], -(t["max_over_p9999"] or 0)))[:PANELS]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(rows) + 1, 1, figsize=(9, 2.6 * (len(rows) + 1)), squeeze=False)
    # a tensor is a graph value (`gelu_1`): say which module and op made it, as the per-layer rows know
    made_by = {r["value"]: f"{r['op']} in {r['module']}" for r in result.layers if r.get("module")}
    for ax, row in zip(axes[:-1, 0], rows, strict=True):
        hist = result.histograms[row["tensor"]]
        edges = hist.edges
        ax.stairs(np.maximum(hist.counts, 0.5), edges, fill=True, color="tab:blue", alpha=0.6)
        ax.set_yscale("log")
        ax.axvspan(row["low"], row["high"], color="tab:green", alpha=0.12,
                   label=plain(f"range ({row['method']})"))
        for x in (row["low"], row["high"]):
            ax.axvline(x, color="tab:green", linewidth=1)
        beyond = hist.below + hist.above
        note = f"; {beyond} values beyond (set-aside samples {row['set_aside_samples']})" if beyond else ""
        source = f" ({made_by[row['tensor']]})" if row["tensor"] in made_by else ""
        ax.set_title(plain(f"{row['tensor']}{source}: max/p99.99 {row['max_over_p9999']:.1f}×, "
                           f"kurtosis {row['kurtosis']:.1f}, clipped {row['clipped']:.3%}{note}"), fontsize=8)
        ax.set_xlabel("activation value (FP32, calibration set)", fontsize=7)
        ax.set_ylabel("count (log)", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="upper right")
    ax = axes[-1, 0]
    layers = [r for r in result.layers if r["sqnr_db"] is not None]
    ax.bar(range(len(layers)), [r["sqnr_db"] for r in layers], color="tab:purple")
    ax.set_xticks(range(len(layers)), [plain(f"{r['value']} ({r['op']})") for r in layers], rotation=60,
                  fontsize=6)
    ax.set_ylabel("SQNR dB", fontsize=8)
    ax.set_xlabel("compared value (ONNX op)", fontsize=7)
    ax.set_title("per-layer SQNR, INT8 vs FP32 on the eval set (intermediates exposed: unfused, diagnostic)",
                 fontsize=8)
    fig.suptitle(f"calibrate: {result.verdict.status.upper()}", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.99))  # room for the suptitle above the first panel's title
    fig.savefig(path, dpi=100, format="png")  # explicit: KFP output paths have no suffix
    plt.close(fig)
    return path


def report_html(result: CalibrationResult) -> str:
    return html_page(result.verdict, (
        _table("accuracy-budget trials (each judged on the INT8 file as deployed)", result.trials,
               ["trial", "tried", "excluded", "reduce_range", "kept", "drop", "accuracy_int8", "top1_agreement",
                "kl_divergence"])
        + _table("INT8 coverage by op type (nodes)", [
            {"op": op, **counts} for op, counts in result.verdict.details.get("int8_coverage", {}).get(
                "op_types", {}).items()], ["op", "int8", "fp32"])
        + _table("tensors", result.tensors, ["tensor", "method", "low", "high", "min", "max", "max_over_p9999",
                                             "kurtosis", "quantized", "clipped", "eval_outside",
                                             "set_aside_samples", "outlier"])
        + _table("per-layer SQNR (diagnostic: intermediates exposed, so ORT's Q/DQ fusions are off)",
                 result.layers, ["value", "op", "module", "sqnr_db", "introduced_db"])))


def _table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{c}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
                   for r in rows)
    return f"<h2>{title}</h2><table><tr>{head}</tr>{body}</table>"


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)
