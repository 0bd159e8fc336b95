"""The champion-vs-candidate table as Markdown (KFP UI and MLflow). Slice names and the champion's label come
from users, so every such string is escaped before it lands in a cell."""

from __future__ import annotations

import html
import re
from typing import Any

from skewgate.common.verdict import Verdict

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def escape(text: object) -> str:
    """Plain text for a Markdown table cell: no HTML, no emphasis or links, no cell breaks."""
    return _MARKDOWN.sub(r"\\\1", html.escape(str(text), quote=False)).replace("\n", " ").replace("\r", " ")


def comparison_markdown(verdict: Verdict) -> str:
    details = verdict.details
    champion = details.get("champion")
    lines = [f"# compare: {verdict.status.upper()}", "", escape(verdict.message), "",
             f"Task: {escape(details.get('task'))}, {details.get('samples')} samples; champion: "
             + (escape(champion["label"]) if champion else "none (first promotion)"), "",
             "| slice | metric | champion | candidate | difference | interval | allowed regression | result |",
             "|---|---|---|---|---|---|---|---|"]
    confidence = details.get("confidence", 0.95)
    for row in details.get("table", []):
        interval = "" if "ci_low" not in row else f"[{row['ci_low']:+.4g}, {row['ci_high']:+.4g}]"
        result = "" if "passed" not in row else ("ok" if row["passed"] else "**blocked**")
        lines.append(f"| {escape(row['slice'])} | {row['metric']} | {_num(row.get('champion'))} "
                     f"| {_num(row['candidate'])} | {_num(row.get('difference'), sign=True)} | {interval} "
                     f"| {_num(row.get('allowed'))} | {result} |")
    lines.append(f"\nIntervals: paired bootstrap, {details.get('resamples')} resamples, {confidence:.0%}.")
    slices = details.get("slices")
    if slices:
        worst = slices.get("worst")
        if worst:
            lines.append(f"\nWorst slice: **{escape(worst['slice'])}** ({worst['metric']} "
                         f"{_num(worst['candidate'])}).")
        small = [s for s in slices["slices"] if not s["judged"]]
        if small:
            lines.append(f"\nNot judged (fewer than {slices['min_size']} samples): "
                         + ", ".join(f"{escape(s['slice'])} ({s['samples']})" for s in small))
    return "\n".join(lines) + "\n"


def _num(value: Any, *, sign: bool = False) -> str:
    if value is None:
        return ""
    return f"{value:+.4g}" if sign else f"{value:.4g}"
