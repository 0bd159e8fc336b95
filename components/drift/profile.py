"""The reference profile: built once from the training data, reused by every drift run (nightly included).

A versioned `.npz` (no pickles): a JSON header plus arrays — per numeric feature a quantile sketch for KS (the
KS statistic from it is within `ks_error_bound` of the exact one), decile edges for the coverage heatmap and NaN
share; per categorical feature its category counts; for MMD the standardisation, the random-feature parameters,
the reference mean embedding and the covariance of the features (for the Gaussian null).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.drift.data import Features
from skewgate.drift.ks import ReferenceECDF
from skewgate.drift.mmd import RandomFeatures

PROFILE_SCHEMA = "skewgate.drift-profile"
PROFILE_VERSION = 1
DEFAULT_SKETCH = 4096


@dataclass
class ReferenceProfile:
    dtypes: dict[str, str]
    numeric_names: tuple[str, ...]
    rows: int
    sha256: str
    seed: int
    ecdfs: list[ReferenceECDF]
    edges: np.ndarray  # numeric features × 11: min, deciles 10..90 %, max (NaN where a feature has no values)
    nan_share: dict[str, float]
    categories: dict[str, dict[str, int]]
    mmd_space: str  # "features" or "embedding:<output>"
    center: np.ndarray
    scale: np.ndarray
    features: RandomFeatures
    mean_embedding: np.ndarray
    covariance: np.ndarray
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ks_error_bound(self) -> float:
        return max((e.error_bound for e in self.ecdfs), default=0.0)

    def sketched(self, q: int) -> ReferenceProfile:
        """The same profile with each exact ECDF cut down to `q + 1` quantiles and no raw rows: what is saved."""
        return dataclasses.replace(
            self, ecdfs=[ReferenceECDF.sketch(e.values, q=q) if e.is_exact else e for e in self.ecdfs],
            extra={k: v for k, v in self.extra.items() if k != "raw_reference"})


def standardise(x: np.ndarray, center: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """(x − center)/scale with NaN → 0 (the reference mean): MMD sees no units and no holes. One new array."""
    z = np.asarray(x, dtype=np.float32) - center
    z /= scale
    return np.nan_to_num(z, copy=False, nan=0.0, posinf=0.0, neginf=0.0)


def standardisation(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and standard deviation, ignoring NaN; constant or empty columns get scale 1."""
    center = np.nan_to_num(np.nanmean(x, axis=0, dtype=np.float64)).astype(np.float32)
    scale = np.nanstd(x, axis=0, dtype=np.float64)
    return center, np.where(np.isfinite(scale) & (scale > 0), scale, 1.0).astype(np.float32)


def build_profile(reference: Features, standardised: np.ndarray, *, center: np.ndarray, scale: np.ndarray,
                  mmd_space: str, bandwidths: tuple[float, ...], features: int, seed: int,
                  sketch: int | None) -> ReferenceProfile:
    """`standardised`: the MMD input after `standardise(x, center, scale)`. `sketch=None` keeps every sorted
    value (exact KS, in memory); an int keeps that many quantiles."""
    ecdfs, edges = [], []
    for j in range(len(reference.numeric_names)):
        column = reference.numeric[:, j]
        finite = column[~np.isnan(column)]
        ecdfs.append(ReferenceECDF.exact(finite) if sketch is None else ReferenceECDF.sketch(finite, q=sketch))
        edges.append(np.quantile(finite, np.linspace(0, 1, 11)) if finite.size else np.full(11, np.nan))
    nan_share = {n: float(np.isnan(reference.numeric[:, j]).mean()) for j, n in enumerate(reference.numeric_names)}
    categories = {}
    for name, values in reference.categorical.items():
        labels, counts = np.unique(np.array([str(v) for v in values if v is not None]), return_counts=True)
        categories[name] = {str(k): int(c) for k, c in zip(labels, counts, strict=True)}
        nan_share[name] = float(np.mean([v is None for v in values]))
    rff = RandomFeatures.draw(standardised.shape[1], bandwidths, features=features, seed=seed)
    mean = rff.mean_embedding(standardised)
    return ReferenceProfile(
        dtypes=dict(reference.dtypes), numeric_names=reference.numeric_names, rows=reference.rows,
        sha256=reference.sha256, seed=seed, ecdfs=ecdfs,
        edges=np.array(edges).reshape(len(ecdfs), 11), nan_share=nan_share, categories=categories,
        mmd_space=mmd_space, center=center, scale=scale, features=rff, mean_embedding=mean,
        covariance=rff.covariance(standardised, mean),
    )


def save_profile(profile: ReferenceProfile, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {
        "schema": PROFILE_SCHEMA, "version": PROFILE_VERSION, "dtypes": profile.dtypes,
        "numeric_names": list(profile.numeric_names), "rows": profile.rows, "sha256": profile.sha256,
        "seed": profile.seed, "ecdf_n": [e.n for e in profile.ecdfs], "nan_share": profile.nan_share,
        "categories": profile.categories, "mmd_space": profile.mmd_space,
        "bandwidths": list(profile.features.bandwidths), "ks_error_bound": profile.ks_error_bound,
        "extra": {k: v for k, v in profile.extra.items() if k != "raw_reference"},
    }
    arrays = {f"ecdf_values_{j}": e.values for j, e in enumerate(profile.ecdfs)}
    arrays |= {f"ecdf_ranks_{j}": e.ranks for j, e in enumerate(profile.ecdfs) if e.ranks is not None}
    with path.open("wb") as handle:  # a file handle: np.savez would otherwise append ".npz" to the name
        np.savez_compressed(
            handle, header=np.array(json.dumps(header)), edges=profile.edges, center=profile.center,
            scale=profile.scale, rff_weights=profile.features.weights, rff_offsets=profile.features.offsets,
            mean_embedding=profile.mean_embedding, covariance=profile.covariance, **arrays)
    return path


def is_profile(path: str | Path) -> bool:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return "header" in archive.files and "rff_weights" in archive.files
    except (OSError, ValueError, EOFError):
        return False


def load_profile(path: str | Path) -> ReferenceProfile:
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {name: archive[name] for name in archive.files}
        header = json.loads(str(data["header"]))
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise InputError(path, expected="a skewgate drift profile", found=f"{type(err).__name__}: {err}") from err
    if header.get("schema") != PROFILE_SCHEMA or header.get("version") != PROFILE_VERSION:
        raise InputError(path, field="schema/version", expected=f"{PROFILE_SCHEMA} v{PROFILE_VERSION}",
                         found=f"{header.get('schema')} v{header.get('version')}")
    ecdfs = [ReferenceECDF(values=data[f"ecdf_values_{j}"], ranks=data.get(f"ecdf_ranks_{j}"), n=n)
             for j, n in enumerate(header["ecdf_n"])]
    rff = RandomFeatures(weights=data["rff_weights"], offsets=data["rff_offsets"],
                         bandwidths=tuple(header["bandwidths"]))
    profile = ReferenceProfile(
        dtypes=header["dtypes"], numeric_names=tuple(header["numeric_names"]), rows=header["rows"],
        sha256=header["sha256"], seed=header["seed"], ecdfs=ecdfs, edges=data["edges"],
        nan_share=header["nan_share"], categories=header["categories"], mmd_space=header["mmd_space"],
        center=data["center"], scale=data["scale"], features=rff, mean_embedding=data["mean_embedding"],
        covariance=data["covariance"], extra=header.get("extra", {}),
    )
    profile.extra["profile_sha256"] = sha256_file(path)
    return profile
