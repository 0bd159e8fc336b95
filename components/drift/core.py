"""The drift gate: schema, NaN share, KS per feature (chi-square for categories) with multiple-testing
correction and an effect-size floor, and MMD² on standardised features or on embeddings.

Decision matrix: neither drifts → pass; KS only or MMD only → warn; both → fail. Defaults and their false-positive
rates under no drift: KS family at α = 0.05 after Benjamini–Hochberg (under the global null BH controls the
family-wise rate, so P(KS flags) ≤ 0.05, less with the effect floor); MMD at α = 0.05 (P(MMD flags) ≤ 0.05);
`fail` needs both, so P(fail) ≤ 0.05.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.drift import ks
from skewgate.drift.data import Features, check_schema, load_features
from skewgate.drift.mmd import (
    BANDWIDTH_FACTORS,
    gaussian_null_pvalue,
    median_bandwidth,
    mmd_exact,
    mmd_rff,
)
from skewgate.drift.profile import (
    ReferenceProfile,
    build_profile,
    is_profile,
    load_profile,
    standardisation,
    standardise,
)

log = logging.getLogger(__name__)
STEP = "drift"


@dataclass(frozen=True)
class DriftOptions:
    """Thresholds and knobs; the defaults are the documented ones."""

    alpha_ks: float = 0.05
    alpha_mmd: float = 0.05
    correction: ks.Correction = "bh"
    min_effect: float = 0.05  # KS D (or Cramér's V) below this is never drift, however small the p-value
    nan_tolerance: float = 0.05  # allowed change in a feature's NaN share
    permutations: int = 200
    exact_max_rows: int = 2000  # pooled rows up to which MMD uses the exact kernel matrix
    rff_features: int = 510
    sketch: int = 4096  # quantiles kept per feature in a saved profile
    seed: int = 0


@dataclass(frozen=True)
class DriftResult:
    verdict: Verdict
    features: list[dict[str, Any]]  # the per-feature table
    coverage: np.ndarray  # numeric features × 13 bins (below, 10 deciles, above, NaN)
    profile: ReferenceProfile


def embed(onnx_path: Path, output: str, features: Features, *, source: str) -> np.ndarray:
    """Run the ONNX model on the `.npz` inputs named as its inputs; return the named output, one row per sample."""
    import onnxruntime as ort

    from skewgate.common.io import load_npz, load_onnx, onnx_input_specs

    model = load_onnx(onnx_path)
    if output not in {o.name for o in model.graph.output}:
        raise InputError(onnx_path, field=output, expected="a graph output to embed with",
                         found=f"outputs {[o.name for o in model.graph.output]}")
    arrays = load_npz(source, expected=onnx_input_specs(model))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feeds = {spec.name: arrays[spec.name] for spec in onnx_input_specs(model)}
    (result,) = session.run([output], feeds)
    return np.asarray(result, dtype=np.float32).reshape(len(result), -1)


def make_profile(reference: str | Path, *, options: DriftOptions = DriftOptions(), embed_onnx: Path | None = None,
                 embed_output: str | None = None, exact: bool = False) -> ReferenceProfile:
    data = load_features(reference)
    space, mmd_input = "features", data.numeric
    if embed_onnx is not None:
        if not embed_output:
            raise InputError("--embed-output", expected="the output to embed with", found="nothing")
        mmd_input, space = embed(embed_onnx, embed_output, data, source=str(reference)), f"embedding:{embed_output}"
    if mmd_input.shape[1] == 0:
        raise InputError(reference, expected="at least one numeric feature (or --embed-onnx)", found="none")
    rng = np.random.default_rng(options.seed)
    center, scale = standardisation(mmd_input)
    z = standardise(mmd_input, center, scale)
    bandwidth = median_bandwidth(z, z, rng=rng)
    profile = build_profile(data, z, center=center, scale=scale, mmd_space=space,
                            bandwidths=tuple(bandwidth * f for f in BANDWIDTH_FACTORS),
                            features=options.rff_features, seed=options.seed, sketch=None if exact else options.sketch)
    # exact mode keeps the standardised rows for the permutation test
    profile.extra["raw_reference"] = z if exact else None
    return profile


def drift_gate(*, reference: str | Path, current: str | Path, options: DriftOptions = DriftOptions(),
               embed_onnx: Path | None = None, embed_output: str | None = None,
               model: Path | None = None) -> DriftResult:
    """Compare `current` with `reference` (raw data or a saved profile). `model` (default: `embed_onnx`) is the
    artifact the verdict is about, so that promote can match it to the file it promotes."""
    from_profile = is_profile(reference)
    log.info("loading reference%s and current data", " profile" if from_profile else "")
    profile = load_profile(reference) if from_profile else make_profile(
        reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output, exact=True)
    cur = load_features(current)
    check_schema(profile.dtypes, cur, reference_source=str(reference))
    rng = np.random.default_rng(options.seed)

    log.info("KS on %d numeric and chi-square on %d categorical features", len(cur.numeric_names),
             len(cur.categorical))
    table = _feature_tests(profile, cur)
    pvalues = np.array([row["pvalue"] for row in table], dtype=np.float64)
    testable = ~np.isnan(pvalues)
    adjusted = np.full(pvalues.shape, np.nan)
    adjusted[testable] = ks.adjust(pvalues[testable], options.correction)
    for row, adj in zip(table, adjusted, strict=True):
        row["adjusted_pvalue"] = None if np.isnan(adj) else float(adj)
        row["drifted"] = bool(not np.isnan(adj) and adj < options.alpha_ks and row["effect"] >= options.min_effect)
    drifted = [row for row in table if row["drifted"]]
    table.sort(key=lambda r: (not r["drifted"], -(r["effect"] or 0.0)))

    log.info("MMD² in %s space", profile.mmd_space)
    mmd_value, mmd_p, mmd_method = _mmd(profile, cur, options, rng, embed_onnx, embed_output, str(current))
    nan_changes = {n: abs(_nan_share(cur, n) - share) for n, share in profile.nan_share.items()}
    worst_nan = max(nan_changes.items(), key=lambda kv: kv[1], default=("", 0.0))
    ks_drift, mmd_drift = bool(drifted), mmd_p < options.alpha_mmd
    checks = [
        Check("nan_share", passed=worst_nan[1] <= options.nan_tolerance, value=worst_nan[1],
              limit=options.nan_tolerance, severity="warn",
              detail=f"largest change in NaN share: {worst_nan[0]!r} ({worst_nan[1]:.3f})" if worst_nan[0]
              else "no features"),
        Check("ks_drift", passed=not ks_drift, value=len(drifted), limit=0, severity="warn",
              detail=(f"{len(drifted)}/{len(table)} features drifted (adjusted p < {options.alpha_ks}, effect ≥ "
                      f"{options.min_effect}): " + ", ".join(r["feature"] for r in table[:10] if r["drifted"]))
              if drifted else f"no feature drifted among {len(table)}"),
        Check("mmd_drift", passed=not mmd_drift, value=mmd_p, limit=options.alpha_mmd, severity="warn",
              detail=f"MMD² {mmd_value:.3g} in {profile.mmd_space} space, p = {mmd_p:.4g} ({mmd_method})"),
        Check("joint_drift", passed=not (ks_drift and mmd_drift), value=float(ks_drift and mmd_drift), limit=0,
              detail="both KS and MMD detect drift" if ks_drift and mmd_drift else "not both"),
    ]
    subject_path = model or embed_onnx
    subject = Subject(
        artifact=str(subject_path) if subject_path else str(current),
        sha256=sha256_file(subject_path) if subject_path else cur.sha256,
        data={"reference": profile.sha256, "current": cur.sha256},
    )
    details = {
        "seed": options.seed, "options": {k: getattr(options, k) for k in DriftOptions.__dataclass_fields__},
        "reference_from_profile": from_profile, "ks_error_bound": profile.ks_error_bound,
        "mmd": {"value": mmd_value, "pvalue": mmd_p, "method": mmd_method, "space": profile.mmd_space,
                "bandwidths": list(profile.features.bandwidths)},
        "constant_features": [n for n, e in zip(profile.numeric_names, profile.edges, strict=True) if e[0] == e[-1]],
        "features": table[:200],
    }
    verdict = Verdict.from_checks(STEP, checks, subject=subject, details=details)
    return DriftResult(verdict=verdict, features=table, coverage=_coverage(profile, cur), profile=profile)


def _nan_share(cur: Features, name: str) -> float:
    if name in cur.categorical:
        return float(np.mean([v is None for v in cur.categorical[name]]))
    column = cur.numeric[:, cur.numeric_names.index(name)]
    return float(np.isnan(column).mean())


def _feature_tests(profile: ReferenceProfile, cur: Features) -> list[dict[str, Any]]:
    rows = []
    for j, name in enumerate(profile.numeric_names):
        column = cur.numeric[:, cur.numeric_names.index(name)]
        column = column[~np.isnan(column)]
        ecdf = profile.ecdfs[j]
        d = ks.ks_statistic(ecdf, column) if column.size and ecdf.n else float("nan")
        p = ks.ks_pvalue(d, ecdf.n, column.size)
        rows.append({"feature": name, "kind": "numeric", "test": "ks", "statistic": _num(d), "pvalue": p,
                     "effect": _num(d) or 0.0})
    for name, counts in profile.categories.items():
        current = Counter(str(v) for v in cur.categorical[name] if v is not None)
        keys = sorted(set(counts) | set(current))
        stat, p, v = ks.chi_square(np.array([counts.get(k, 0) for k in keys]),
                                   np.array([current.get(k, 0) for k in keys]))
        new = sorted(set(current) - set(counts))
        rows.append({"feature": name, "kind": "categorical", "test": "chi2", "statistic": stat, "pvalue": p,
                     "effect": v, "new_categories": new[:20]})
    return rows


def _num(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _mmd(profile: ReferenceProfile, cur: Features, options: DriftOptions, rng: np.random.Generator,
         embed_onnx: Path | None, embed_output: str | None, current: str) -> tuple[float, float, str]:
    if profile.mmd_space == "features":
        cur_input = cur.numeric
    else:
        if embed_onnx is None:
            raise InputError("--embed-onnx", expected=f"the model the profile embedded with ({profile.mmd_space})",
                             found="none")
        cur_input = embed(embed_onnx, embed_output or profile.mmd_space.split(":", 1)[1], cur, source=current)
    z_cur = standardise(cur_input, profile.center, profile.scale)
    z_ref = profile.extra.get("raw_reference")
    if z_ref is not None:
        if len(z_ref) + len(z_cur) <= options.exact_max_rows:
            value, p = mmd_exact(z_ref, z_cur, profile.features.bandwidths, permutations=options.permutations,
                                 rng=rng)
            return value, p, f"exact kernel matrix, {options.permutations} permutations"
        value, p = mmd_rff(z_ref, z_cur, profile.features, permutations=options.permutations, rng=rng)
        return value, p, f"random Fourier features (D={profile.features.size}), {options.permutations} permutations"
    value = float(np.sum((profile.features.mean_embedding(z_cur) - profile.mean_embedding) ** 2))
    p = gaussian_null_pvalue(value, profile.covariance, profile.rows, len(z_cur), draws=max(options.permutations, 1000),
                             rng=rng)
    return value, p, f"random Fourier features (D={profile.features.size}) vs profile, Gaussian null"


def _coverage(profile: ReferenceProfile, cur: Features) -> np.ndarray:
    """Share of current rows per reference bin: below min, deciles 1..10, above max, NaN."""
    shares = np.zeros((len(profile.numeric_names), 13))
    for j, name in enumerate(profile.numeric_names):
        column = cur.numeric[:, cur.numeric_names.index(name)].astype(np.float64)
        edges = profile.edges[j]
        nan = np.isnan(column)
        values = column[~nan]
        if np.isnan(edges).any() or column.size == 0:
            shares[j, 12] = nan.mean() if column.size else 0.0
            continue
        below, above = values < edges[0], values > edges[-1]
        inside = values[~below & ~above]
        bins = np.clip(np.searchsorted(edges[1:-1], inside, side="right"), 0, 9)
        shares[j, 1:11] = np.bincount(bins, minlength=10) / column.size
        shares[j, 0], shares[j, 11], shares[j, 12] = below.sum() / column.size, above.sum() / column.size, nan.mean()
    return shares
