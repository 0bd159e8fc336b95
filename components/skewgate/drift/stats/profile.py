"""The reference profile: built once from the training data, reused by every drift run (nightly included).

A versioned `.npz` (no pickles): a JSON header plus arrays — per numeric feature a quantile sketch for KS (the
KS statistic from it is within `ks_error_bound` of the exact one), decile edges for the coverage heatmap and NaN
share; per categorical feature its category counts; for MMD the standardisation, the random-feature parameters,
the reference mean embedding (over `mmd_rows` rows) and the covariance of the features (for the Gaussian null).

A periodic profile (`--period weekday`, stats/periods.py) is one `.npz` holding a profile per period (each a whole
profile's bytes, so that one file, one digest, is what promote records and the nightly run reads);
`load_profile(path, period=…)` reads one of them.
"""

from __future__ import annotations

import dataclasses
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.drift.stats.categories import OTHER
from skewgate.drift.stats.mmd import RandomFeatures
from skewgate.drift.stats.new_ids import SeenValues
from skewgate.drift.stats.periods import Period, ordered
from skewgate.drift.stats.sketch import QuantileSketch
from skewgate.drift.stats.stream import sketch_arrays, sketches_from

PROFILE_SCHEMA = "skewgate.drift-profile"
# 3: id features keep ids ranked on rows that are not tested (`categories.kept_categories`); 4: the set of values
# each categorical feature held (`new_ids.SeenValues`), for the new-ids check
PROFILE_VERSION = 4
READABLE_VERSIONS = (2, 3, PROFILE_VERSION)  # a v2 profile is read while no id feature of it was cut
PERIODIC_SCHEMA, PERIODIC_VERSION = "skewgate.drift-profile-periodic", 1


@dataclass
class ReferenceProfile:
    dtypes: dict[str, str]
    numeric_names: tuple[str, ...]
    rows: int
    sha256: str
    seed: int
    sketches: list[QuantileSketch]
    edges: np.ndarray  # numeric features × 11: min, deciles 10..90 %, max (NaN where a feature has no values)
    nan_share: dict[str, float]
    categories: dict[str, dict[str, int]]
    mmd_space: str  # "features" or "embedding:<output>"
    center: np.ndarray
    scale: np.ndarray
    features: RandomFeatures
    mean_embedding: np.ndarray
    covariance: np.ndarray
    mmd_rows: int  # rows behind the mean embedding (a seeded share of `rows` beyond the MMD row budget)
    # per categorical feature, every value the reference held (before any folding); empty in a v2/v3 profile
    seen: dict[str, SeenValues] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ks_error_bound(self) -> float:
        """Largest error of a reference CDF from its sketch (0 when every value is kept)."""
        return max((s.error_bound for s in self.sketches), default=0.0)

    def sketched(self, q: int) -> ReferenceProfile:
        """The same profile with each sketch cut down to about `q` values and no raw rows: what is saved."""
        return dataclasses.replace(
            self, sketches=[s.compress(q) for s in self.sketches],
            extra={k: v for k, v in self.extra.items() if k != "raw_reference"})


def standardise(x: np.ndarray, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(x − center)/scale with NaN → 0 (the reference mean): MMD sees no units and no holes. One new array."""
    z = np.asarray(x, dtype=np.float32) - center
    z /= scale
    bad = ~np.isfinite(z)
    if bad.any():
        z[bad] = 0.0
    return z


def decile_edges(sketch: QuantileSketch) -> np.ndarray:
    return sketch.quantiles(np.linspace(0, 1, 11)) if sketch.n else np.full(11, np.nan)


@dataclass(frozen=True)
class Periods:
    """What a periodic profile holds: a profile per label of `period`, by the `timestamp` column."""

    period: Period
    timestamp: str
    rows: dict[str, int]  # label → reference rows, in the cycle's order

    @property
    def labels(self) -> list[str]:
        return list(self.rows)


def save_profile(profile: ReferenceProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:  # a file handle: np.savez would otherwise append ".npz" to the name
        _write(profile, handle)
    return path


def save_periodic(profiles: dict[str, ReferenceProfile], path: str | Path, *, period: Period,
                  timestamp: str) -> Path:
    """One file of a profile per period label (each saved as `save_profile` would, as bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = {}
    for label, profile in profiles.items():
        buffer = io.BytesIO()
        _write(profile, buffer)
        parts[f"period_{label}"] = np.frombuffer(buffer.getvalue(), dtype=np.uint8)
    header = {"schema": PERIODIC_SCHEMA, "version": PERIODIC_VERSION, "period": period, "timestamp": timestamp,
              "rows": {label: profiles[label].rows for label in ordered(profiles)}}
    with path.open("wb") as handle:
        np.savez_compressed(handle, header=np.array(json.dumps(header)), allow_pickle=False, **parts)
    return path


def _write(profile: ReferenceProfile, handle: Any) -> None:
    header = {
        "schema": PROFILE_SCHEMA, "version": PROFILE_VERSION, "dtypes": profile.dtypes,
        "numeric_names": list(profile.numeric_names), "rows": profile.rows, "sha256": profile.sha256,
        "seed": profile.seed, "nan_share": profile.nan_share, "mmd_rows": profile.mmd_rows,
        "sketches": [{"n": s.n, "complete": s.complete} for s in profile.sketches],
        "categories": profile.categories, "mmd_space": profile.mmd_space,
        "bandwidths": list(profile.features.bandwidths), "ks_error_bound": profile.ks_error_bound,
        "extra": {k: v for k, v in profile.extra.items() if k != "raw_reference"},
        "seen": [{"feature": name, "limit": str(seen.limit), "values": seen.values, "distinct": seen.distinct,
                  "singletons": seen.singletons} for name, seen in profile.seen.items()],
    }
    seen_arrays = {f"seen_{i}": seen.hashes for i, seen in enumerate(profile.seen.values())}
    # allow_pickle=False: every array is numeric (the header a unicode string), and profiles are loaded without
    # pickles; naming it also keeps the `**` of sketch arrays from standing for that keyword.
    np.savez_compressed(
        handle, header=np.array(json.dumps(header)), edges=profile.edges, center=profile.center,
        scale=profile.scale, rff_weights=profile.features.weights, rff_offsets=profile.features.offsets,
        mean_embedding=profile.mean_embedding, covariance=profile.covariance, allow_pickle=False,
        **sketch_arrays(profile.sketches), **seen_arrays)


def is_profile(path: str | Path) -> bool:
    """A drift profile, or a periodic one."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return "header" in archive.files and ("rff_weights" in archive.files or any(
                name.startswith("period_") for name in archive.files))
    except (OSError, ValueError, EOFError):
        return False


def periods_of(path: str | Path) -> Periods | None:
    """The periods a periodic profile holds; None for a profile of one data set."""
    try:
        with np.load(path, allow_pickle=False) as archive:  # lazy: only the header is read
            header = json.loads(str(archive["header"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(path, expected="a skewgate drift profile", found=f"{type(err).__name__}: {err}") from err
    return _periods(Path(path), header)


def _periods(path: Path, header: dict[str, Any]) -> Periods | None:
    if header.get("schema") != PERIODIC_SCHEMA:
        return None
    if header.get("version") != PERIODIC_VERSION:
        raise InputError(path, field="schema/version", expected=f"{PERIODIC_SCHEMA} v{PERIODIC_VERSION}",
                         found=f"v{header.get('version')} (rebuild it with `skewgate drift profile --period`)")
    return Periods(period=header["period"], timestamp=header["timestamp"], rows=dict(header["rows"]))


def _read(source: str | Path | io.BytesIO, *, name: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    try:
        with np.load(source, allow_pickle=False) as archive:
            data = {name: archive[name] for name in archive.files}
        return data, json.loads(str(data["header"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(name, expected="a skewgate drift profile",
                         found=f"{type(err).__name__}: {err}") from err


def load_profile(path: str | Path, *, period: str | None = None) -> ReferenceProfile:
    """The profile at `path`; of a periodic one, the profile of the `period` label (which it must hold)."""
    path = Path(path)
    data, header = _read(path, name=path)
    periods = _periods(path, header)
    if periods is not None:
        if period is None:
            raise InputError(path, expected="a profile of one data set", found=f"a profile per {periods.period} "
                             f"(by {periods.timestamp!r}): the night's {periods.period} chooses one")
        if period not in periods.rows:
            raise InputError(path, field=periods.timestamp, expected=f"a {periods.period} the reference held "
                             f"({', '.join(periods.labels)})", found=period)
        data, header = _read(io.BytesIO(data[f"period_{period}"].tobytes()), name=f"{path} ({period})")
    profile = _from_archive(path, data, header)
    if periods is not None:
        profile.extra["period"] = {"period": periods.period, "timestamp": periods.timestamp, "judged": period,
                                   "labels": periods.labels}
    profile.extra["profile_sha256"] = sha256_file(path)
    return profile


def _from_archive(path: Path, data: dict[str, np.ndarray], header: dict[str, Any]) -> ReferenceProfile:
    if header.get("schema") != PROFILE_SCHEMA or header.get("version") not in READABLE_VERSIONS:
        raise InputError(path, field="schema/version", expected=f"{PROFILE_SCHEMA} v{PROFILE_VERSION}",
                         found=f"{header.get('schema')} v{header.get('version')} (rebuild it with `skewgate drift "
                               "profile`)")
    cut = [name for name, counts in header.get("categories", {}).items() if OTHER in counts]
    if header["version"] < 3 and cut:  # its kept ids were ranked on the counts it tests: alarms by itself
        raise InputError(path, field="schema/version", expected=f"{PROFILE_SCHEMA} v{PROFILE_VERSION}",
                         found=f"v{header['version']}, whose id features {cut[:5]} kept the ids their own tested "
                               "counts ranked, which alarms on unchanged data (rebuild it with `skewgate drift "
                               "profile`)")
    rff = RandomFeatures(weights=data["rff_weights"], offsets=data["rff_offsets"],
                         bandwidths=tuple(header["bandwidths"]))
    return ReferenceProfile(
        dtypes=header["dtypes"], numeric_names=tuple(header["numeric_names"]), rows=header["rows"],
        sha256=header["sha256"], seed=header["seed"], sketches=sketches_from(data, header["sketches"]),
        edges=data["edges"],
        nan_share=header["nan_share"], categories=header["categories"], mmd_space=header["mmd_space"],
        center=data["center"], scale=data["scale"], features=rff, mean_embedding=data["mean_embedding"],
        covariance=data["covariance"], mmd_rows=header["mmd_rows"], extra=header.get("extra", {}),
        seen={entry["feature"]: SeenValues(hashes=data[f"seen_{i}"].astype(np.uint64), limit=int(entry["limit"]),
                                           values=int(entry["values"]), distinct=int(entry["distinct"]),
                                           singletons=int(entry["singletons"]))
              for i, entry in enumerate(header.get("seen", []))},
    )
