"""Pictures of parity: per-layer error against depth (PNG for MLflow) and an HTML report for the KFP UI."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from skewgate.common.publishing import html_page, plain, pyplot
from skewgate.parity.core import FP32, INT8, ParityResult

FP16 = "fp32_vs_fp16"


def layer_plot(result: ParityResult, path: str | Path) -> Path:
    """One panel per compared pair: max |error| / tolerance (FP32) or SQNR in dB (INT8), against depth."""
    plt = pyplot()

    pairs: list[str | None] = [p for p in (FP32, INT8, FP16) if result.layers.get(p)]  # None: no panel
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(pairs) or 1, 1, figsize=(10, 3.2 * max(len(pairs), 1)), squeeze=False)
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
        if pair == FP32:
            ax.set_yscale("symlog", linthresh=1e-3)
            ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=1, label="tolerance")
            ax.set_ylabel("max |error| / tolerance")
        else:
            ax.set_ylabel("SQNR (dB)")
        first = (result.verdict.details.get(pair) or {}).get("first_divergence" if pair != FP16 else "first_failure")
        if first:
            index = next((i for i, r in enumerate(rows) if r["value"] == first["value"]), 0)
            ax.annotate(plain(f"first divergence: {_module(first)}, ONNX {first['op']}"), (index, ys[index]),
                        xytext=(10, 10), textcoords="offset points", color="tab:red", fontsize=8,
                        arrowprops={"arrowstyle": "->", "color": "tab:red"})
        ax.set_xticks(range(len(rows)), [plain(f"{r['module']}:{r['op']}") for r in rows], rotation=70,
                      fontsize=6)
        titles = {FP32: "PyTorch vs ONNX Runtime FP32", INT8: "ONNX Runtime FP32 vs INT8", FP16: "FP32 vs FP16"}
        ax.set_title(titles[pair], fontsize=9)
    fig.suptitle(f"parity: {result.verdict.status.upper()}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")  # explicit: KFP output paths have no suffix
    plt.close(fig)
    return path


def report_html(result: ParityResult) -> str:
    tables = []
    for pair, rows in result.layers.items():
        body = "".join(
            f"<tr style='{'background:#fdd' if r['diverged'] else ''}'><td>{r['depth']}</td>"
            f"<td>{html.escape(r['value'])}</td><td>{html.escape(_module(r))}</td><td>{r['op']}</td>"
            f"<td>{_fmt(r['max_abs'])}</td><td>{_fmt(r['worst_ratio'])}</td><td>{_fmt(r['sqnr_db'])}</td></tr>"
            for r in rows)
        tables.append(f"<h2>{pair}</h2><table><tr><th>depth</th><th>value</th><th>module</th><th>op</th>"
                      f"<th>max |err|</th><th>err/tol</th><th>SQNR dB</th></tr>{body}</table>")
    return html_page(result.verdict, "".join(tables))


def _module(row: dict[str, Any]) -> str:
    """`features.1 (BatchNorm2d)`: the module that made the value, and its class where known."""
    return f"{row['module']} ({row['module_type']})" if row.get("module_type") else row["module"]


def _fmt(value: Any) -> str:
    return "" if value is None else f"{value:.4g}"
