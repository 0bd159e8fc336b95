"""The current side of an estimate, tallied: in one pass, or per shard of a snapshot's files and merged.

A shard of the nightly fan-out runs the model on its files and saves its counts (`save_partial`): the confusion
counts the `Tally` keeps, how many samples had NaN/Inf scores and how many scored outside the calibrated range.
The merge task adds the shards' counts (`merge_partials`) and judges once: since every file draws from its own
streams, the merged counts are those one pass over the snapshot finds. A partial is an `.npz` (no pickles): a JSON
`header` naming the model and profile it was tallied under, the files it read with the rows it read of each, and
the counts; the loader refuses a partial of another model or profile, or of another shape, or whose rows do not
add up to its counts, naming the field, and the merge refuses partials that do not read every file of the
snapshot exactly once (`check_cover`) and every row of it (`check_rows`: each file's rows as the snapshot holds
them now, from Parquet footers): counts are only added up when they are the whole snapshot's. A partial that
claims a neighbour's file without its rows' counts (the neighbour's partial left out) is refused; one whose
counts were made up to match is not (partials are not signed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.strict_json import Fields
from skewgate.estimate.method.confusion import Tally
from skewgate.estimate.method.profile import ReferenceFit

SCHEMA, VERSION = "skewgate.estimate-partial", 3  # 3: `rows` per file read; 2: `files` listed (1 counted them)


@dataclass
class CurrentTally:
    """What the current data showed under one fit: the tally of its finite scores, the samples it could not
    score, those scored outside the calibrated range; `predicted` per sample (-1: not finite) when its labels are
    to be read beside the estimate."""

    tally: Tally
    non_finite: int = 0
    extrapolated: int = 0
    predicted: list[np.ndarray] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # rows read per file (its name in the snapshot; "": one file)

    @classmethod
    def empty(cls, fit: ReferenceFit) -> CurrentTally:
        """Nothing tallied yet, under `fit`'s calibrations and seed."""
        return cls(Tally(fit.calibration, fit.resampled, seed=fit.seed))

    @property
    def samples(self) -> int:
        return self.tally.samples + self.non_finite


def save_partial(tallied: CurrentTally, path: str | Path, *, model_sha256: str, profile_sha256: str,
                 files: Mapping[str, int]) -> Path:
    """`files`: the snapshot's files this shard read, as the snapshot lists them, and the rows it read of each
    (the merge checks that the shards read each once, and all of its rows)."""
    path = Path(path)
    tally = tallied.tally
    header = {"schema": SCHEMA, "version": VERSION, "model_sha256": model_sha256, "profile_sha256": profile_sha256,
              "samples": tally.samples, "non_finite": tallied.non_finite, "extrapolated": tallied.extrapolated,
              "files": list(files), "rows": list(files.values())}
    with path.open("wb") as handle:  # a handle: np.savez would otherwise append ".npz" to the name
        np.savez(handle, header=np.array(json.dumps(header)), **{n: getattr(tally, n) for n in Tally.COUNTS})
    return path


def merge_partials(paths: Sequence[str | Path], fit: ReferenceFit, *, model_sha256: str,
                   profile_sha256: str, snapshot: Mapping[str, int], source: str) -> CurrentTally:
    """Every partial's counts under `fit` added up, once they are sure to have read each file of `snapshot` (the
    files of `source`, as it lists them now, and the rows each holds) exactly once, and all of its rows."""
    if not paths:
        raise InputError("partials", expected="at least one shard's partial", found="none")
    merged, read = CurrentTally.empty(fit), dict[str, list[str]]()
    for path in paths:
        part = _load(Path(path), fit, model_sha256=model_sha256, profile_sha256=profile_sha256)
        merged.tally.merge(part.tally)
        merged.non_finite += part.non_finite
        merged.extrapolated += part.extrapolated
        for name, rows in part.rows.items():
            read.setdefault(name, []).append(str(path))
            merged.rows[name] = rows
    check_cover(read, list(snapshot), source=source)
    check_rows(merged.rows, snapshot, source=source)
    return merged


def check_rows(read: Mapping[str, int], snapshot: Mapping[str, int], *, source: str) -> None:
    """Each file's rows as the partials counted them are the rows the snapshot holds: a partial that names a file
    it did not tally (a neighbour's, whose partial was left out) is short of them."""
    wrong = [f"{name}: {read[name]} rows read, {rows} in the file" for name, rows in snapshot.items()
             if read.get(name) != rows]
    if wrong:
        raise InputError("partials", expected=f"every row of the files of {source} tallied",
                         found="; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""))


def check_cover(read: dict[str, list[str]], snapshot: Sequence[str], *, source: str) -> None:
    """`read` (file → the partials that read it) covers `snapshot` once: no file read twice, none missed, none
    that is not the snapshot's (it changed since the shards listed it). The message names up to three of each."""
    def some(names: Sequence[str]) -> str:
        return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")

    twice = [f"{name} (by {' and '.join(read[name])})" for name in sorted(read) if len(read[name]) > 1]
    missed = [name for name in snapshot if name not in read]
    foreign = sorted(set(read) - set(snapshot))
    problems = [f"{what}: {some(names)}" for what, names in (("read twice", twice), ("not read", missed),
                                                            ("not in the snapshot now", foreign)) if names]
    if problems:
        raise InputError("partials", expected=f"shards that read each of the {len(snapshot)} files of {source} once",
                         found="; ".join(problems))


def _load(path: Path, fit: ReferenceFit, *, model_sha256: str, profile_sha256: str) -> CurrentTally:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        header = json.loads(str(arrays.pop("header")))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(path, expected="an estimate shard's partial (`estimate_partial_op`)",
                         found=f"{type(err).__name__}: {err}") from err
    top = Fields(header, source=str(path), where="header")
    if (header.get("schema"), header.get("version")) != (SCHEMA, VERSION):
        raise InputError(path, field="header.schema/version", expected=f"{SCHEMA} v{VERSION}",
                         found=f"{header.get('schema')} v{header.get('version')}")
    for key, expected in (("model_sha256", model_sha256), ("profile_sha256", profile_sha256)):
        if top.sha256(key) != expected:
            raise InputError(path, field=f"header.{key}", expected=f"{expected} (the merge's: every shard tallies "
                             "under one model and profile)", found=header[key])
    tallied = CurrentTally.empty(fit)
    part = tallied.tally
    for name in Tally.COUNTS:
        want = getattr(part, name)
        found = arrays.get(name)
        if found is None or found.shape != want.shape or found.dtype != want.dtype or not np.isfinite(found).all() \
                or (found < 0).any():
            raise InputError(path, field=name, expected=f"non-negative {want.dtype} counts of shape {want.shape}",
                             found="no such array" if found is None else f"{found.dtype} {found.shape}")
        want[...] = found
    counts = {key: top.integer(key) for key in ("samples", "non_finite", "extrapolated")}
    files, rows = top.strings("files"), top.ints("rows")
    if len(set(files)) != len(files):
        raise InputError(path, field="header.files", expected="the files the shard read, each once",
                         found=f"{len(files) - len(set(files))} named twice")
    if min(counts.values()) < 0 or counts["extrapolated"] > counts["samples"] \
            or part.confidence_counts.sum() != counts["samples"]:
        raise InputError(path, field="header.samples", expected="non-negative counts that agree with the arrays",
                         found=", ".join(f"{k} {v}" for k, v in counts.items()))
    if len(rows) != len(files) or min(rows, default=0) < 0 \
            or sum(rows) != counts["samples"] + counts["non_finite"]:
        raise InputError(path, field="header.rows", expected=f"the rows read of each of its {len(files)} files, "
                         f"adding up to its {counts['samples'] + counts['non_finite']} samples (finite or not)",
                         found=f"{len(rows)} counts adding up to {sum(rows)}")
    part.samples = counts["samples"]
    tallied.non_finite, tallied.extrapolated = counts["non_finite"], counts["extrapolated"]
    tallied.rows = dict(zip(files, rows, strict=True))
    return tallied
