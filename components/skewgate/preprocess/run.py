"""The one entry the CLI and the KFP component call: load both callables, judge them on the raw samples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skewgate.common.compare import Tolerance
from skewgate.common.verdict import Verdict
from skewgate.preprocess.core import preprocess_parity


@dataclass(frozen=True, kw_only=True)
class PreprocessOptions:
    array: str | None = None  # which array of the raw .npz (None: the first)
    tolerance: Tolerance | None = None  # None: the tolerance of the training output's dtype


def run_preprocess(*, train: str, serve: str, raw: str | Path,
                   options: PreprocessOptions = PreprocessOptions()) -> Verdict:
    """`train` / `serve`: `module:function`, raw array in, array out (imported here: trusted code only)."""
    return preprocess_parity(train=train, serve=serve, raw=raw, array=options.array,
                             tolerance=options.tolerance).judged_with(options)
