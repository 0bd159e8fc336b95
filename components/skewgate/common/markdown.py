"""Text that a model, a data set or a user chose (names, messages, paths) inside Markdown: always text, never
markup. The one escaper of the KFP reports, the compare table and the registry's version descriptions."""

from __future__ import annotations

import html
import re

_MARKDOWN_SPECIAL = re.compile(r"[\\`*_{}\[\]()#+\-.!|~]")


def escape(text: object) -> str:
    """HTML is entity-escaped (KFP's and MLflow's renderers pass raw HTML through) and every Markdown
    metacharacter is backslash-escaped, so `<img onerror=…>` or `[x](javascript:…)` stays literal."""
    return html.escape(_MARKDOWN_SPECIAL.sub(r"\\\g<0>", str(text)), quote=False)


def cell(text: object) -> str:
    """`escape`d for a table cell: a line break would end the row."""
    return escape(text).replace("\r", " ").replace("\n", " ")
