"""The drift gate: schema, NaN share, KS per feature (chi-square for categories) with multiple-testing
correction and an effect-size floor, and MMD² on standardised features or on embeddings.

A KS statistic read from sketches (beyond `exact_rows`) is judged at the least value it can have (at least
D − `ks_error`): its p-value and effect stay valid whatever the sketches hide. Id features keep the ids ranked on
rows that are not tested, and rare categories are pooled (`stats/categories.py`). Each feature reports the
smallest effect it could flag (`detectable`), so a pass says what it cannot see.

Decision matrix: neither drifts → pass; KS only or MMD only → warn; both → fail. A feature the gate cannot judge
(no finite value on a side, too few samples) fails `testable`: what was not judged is never a pass. A value the
reference never saw, taking more of tonight than chance allows, warns (`new_ids`, stats/new_ids.py). Defaults and
their false-positive rates under no drift: KS family at α = 0.05 after Benjamini–Hochberg (under the global null
BH controls the family-wise rate, so P(KS flags) ≤ 0.05, less with the effect floor); MMD at α = 0.05 (P(MMD
flags) ≤ 0.05); `fail` needs both, so P(fail) ≤ 0.05.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

import numpy as np

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.drift.run import DriftOptions
from skewgate.drift.stats import ks
from skewgate.drift.stats.categories import fold_current, homogeneity, kept_categories, smallest_v
from skewgate.drift.stats.mmd import (
    BANDWIDTH_FACTORS,
    RandomFeatures,
    gaussian_null_pvalue,
    median_bandwidth,
    mmd_exact,
    mmd_rff,
)
from skewgate.drift.stats.new_ids import NewValues, SeenValues, new_values
from skewgate.drift.stats.periods import PeriodRows, single_label
from skewgate.drift.stats.profile import (
    ReferenceProfile,
    decile_edges,
    is_profile,
    load_profile,
    periods_of,
    standardise,
)
from skewgate.drift.stats.sketch import ks_bounds
from skewgate.drift.stats.source import Batch, Source, open_source
from skewgate.drift.stats.stream import Accumulator, MmdPlan, SideStats, replay_mmd
from skewgate.drift.stats.threads import map_features

log = logging.getLogger(__name__)
STEP = "drift"
_DEFAULTS = DriftOptions()
# A p-value is reported no lower than this (a double's range ends near 1e-308), and its exponent beside it: a
# shift so large that p underflows is not "p = 0", which no test can give.
P_FLOOR = 1e-300
# A KS feature is testable when a distance this large (half of all values moved past each other) would be
# flagged at its level; fewer samples judge nothing (about 10 current rows with a large reference at 2 features)
TESTABLE_D = 0.5


class FeatureTest(TypedDict):
    """One row of the per-feature table: the verdict's `features`, MLflow's `features.json`, the Pushgateway's
    per-feature series."""

    feature: str
    kind: Literal["numeric", "categorical"]
    test: Literal["ks", "chi2"]
    statistic: float | None  # None: no finite value on one side
    pvalue: float | None  # None: not testable (`untestable` says why); never exactly 0 (floored at P_FLOOR)
    log10_pvalue: NotRequired[float | None]  # the p-value's exponent where it lies below the floor
    untestable: NotRequired[str]  # why this feature could not be judged (it then fails `testable`)
    effect: float  # KS D (from sketches: the least it can be, ≥ statistic − ks_error) or Cramér's V
    ks_error: NotRequired[float]  # numeric: the largest error of D from the sketches (effect ≥ statistic − it)
    reference_n: NotRequired[int]  # numeric: samples behind the KS p-value, reference side
    current_n: NotRequired[int]  # numeric: samples behind the KS p-value, current side
    cells: NotRequired[int]  # categorical: cells tested (kept categories, "(other)", rare ones pooled)
    detectable: NotRequired[float | None]  # the smallest effect it could flag (size, correction, floor); None: none
    new_categories: NotRequired[list[str]]  # categorical: current values the reference never saw (20 most frequent)
    adjusted_pvalue: NotRequired[float | None]  # after the multiple-testing correction
    drifted: NotRequired[bool]


@dataclass(frozen=True, kw_only=True)
class SideRows:
    reference: int
    current: int


@dataclass(frozen=True, kw_only=True)
class MmdDetails:
    value: float  # MMD²
    pvalue: float
    method: str  # how the value and its p-value were computed, in words
    space: str  # "features" or "embedding:<output>"
    bandwidths: tuple[float, ...]
    rows: SideRows  # rows behind the statistic (a seeded share beyond the MMD row budget)


@dataclass(frozen=True, kw_only=True)
class DriftDetails:
    """The verdict's `details`, serialised field by field (the nightly run and a push to the Pushgateway extend
    it: `NightlyDetails`, `PushedNightlyDetails`)."""

    seed: int
    options: Mapping[str, Any]  # the statistics' options it was judged with (`DriftOptions.judged_settings()`)
    reference_from_profile: bool
    ks_error_bound: float  # largest error of any KS statistic from its sketches (0 when every value was kept)
    rows: SideRows
    mmd: MmdDetails
    constant_features: tuple[str, ...]  # numeric features with one value in the reference
    features: tuple[FeatureTest, ...]  # drifted first, then by effect; the first 200 (the rest are in MLflow)
    # of a periodic profile: its period, timestamp column, the labels it holds and the one judged tonight
    period: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class NightlyDetails(DriftDetails):
    model_version: str  # the `alias` version judged and tagged
    run_date: str
    shards: int  # 1 for the single task
    series: Mapping[str, Any] | None = None  # "over the series" (series.py): the running e-value and its night


@dataclass(frozen=True, kw_only=True)
class PushedNightlyDetails(NightlyDetails):
    pushgateway: str


@dataclass(frozen=True)
class DriftResult:
    verdict: Verdict
    details: DriftDetails  # the verdict's details, typed
    features: list[FeatureTest]  # the whole per-feature table
    coverage: np.ndarray  # numeric features × 13 bins (below, 10 deciles, above, NaN)
    profile: ReferenceProfile


def embedder(onnx_path: Path, output: str, source: Source) -> Callable[[Batch], np.ndarray]:
    """A function from a batch of the `.npz` inputs named as the model's inputs to the named output, one row
    per sample."""
    import onnxruntime as ort

    from skewgate.common.io import load_npz, load_onnx, onnx_input_specs

    model = load_onnx(onnx_path)
    if output not in {o.name for o in model.graph.output}:
        raise InputError(onnx_path, field=output, expected="a graph output to embed with",
                         found=f"outputs {[o.name for o in model.graph.output]}")
    specs = onnx_input_specs(model)
    load_npz(source.location, expected=specs)  # checks names, dtypes and shapes once, with clear errors
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])

    def run(batch: Batch) -> np.ndarray:
        (result,) = session.run([output], {spec.name: batch.arrays[spec.name] for spec in specs})
        return np.asarray(result, dtype=np.float32).reshape(len(result), -1)

    return run


def _accumulate(source: Source, numeric_names: tuple[str, ...], options: DriftOptions, **kwargs: Any) -> SideStats:
    acc = Accumulator(numeric_names, source.numeric_names, source.categorical_names, seed=options.seed,
                      exact_rows=options.exact_rows, capacity=options.sketch_capacity,
                      selection_share=options.id_selection_share, **kwargs)
    for batch in source.batches(batch_rows=options.batch_rows):
        acc.add(batch)
    return acc.result()


def _mmd_rate(rows: int, options: DriftOptions) -> float:
    return 1.0 if rows <= options.mmd_max_rows else options.mmd_max_rows / rows


def signature_ids(model: Path | None) -> set[str]:
    """The integer inputs of an ONNX model: token or item ids that feed an embedding lookup, by convention."""
    if model is None or model.suffix.lower() != ".onnx" or not model.is_file():
        return set()
    from skewgate.common.io import load_onnx, onnx_input_specs

    return {spec.name for spec in onnx_input_specs(load_onnx(model)) if np.dtype(spec.dtype).kind in "iu"}


def make_profile(reference: str | Path, *, options: DriftOptions = _DEFAULTS, embed_onnx: Path | None = None,
                 embed_output: str | None = None, exact: bool = False, model: Path | None = None,
                 rows_of: PeriodRows | None = None) -> ReferenceProfile:
    """Two streamed passes: tables, moments and a row sample; then, with the standardisation and bandwidths
    known, the random-feature mean embedding. `exact` keeps the sketches as streamed and the standardised rows
    while few enough; otherwise the sketches are cut to `options.sketch` values (what a saved profile holds).
    `options.timestamp` is not a feature; `rows_of`: the profile of one period's rows."""
    ids = set(options.ids) | signature_ids(model or embed_onnx)  # declared, or integer inputs of the model
    source = open_source(reference, feature_axes=dict(options.feature_axes), ids=ids,
                         exclude=(options.timestamp,) if options.timestamp else (), rows_of=rows_of)
    space, embed = "features", None
    if embed_onnx is not None:
        if not embed_output:
            raise InputError("--embed-output", expected="the output to embed with", found="nothing")
        embed, space = embedder(embed_onnx, embed_output, source), f"embedding:{embed_output}"
    if embed is None and not source.numeric_names:
        raise InputError(reference, expected="at least one numeric feature (or --embed-onnx)", found="none")
    log.info("reading the reference %s (tables, moments, a %d-row sample)", source, options.sample_rows)
    # MMD's rows are drawn in this pass too (at the share the row count sets), then mapped once the
    # standardisation is known: no second read while they fit in `SELECT_BUDGET`
    rate = _mmd_rate(source.count_rows(), options)
    first = _accumulate(source, source.numeric_names, options, sample_rows=options.sample_rows, embedder=embed,
                        split_ids=source.ids, select_rate=rate)
    if first.rows == 0 or first.sample is None:
        raise InputError(reference, expected="at least one row", found="none")
    center, scale = first.standardisation()
    sample = standardise(first.sample, center, scale)
    bandwidth = median_bandwidth(sample, sample, rng=np.random.default_rng(options.seed))
    rff = RandomFeatures.draw(sample.shape[1], tuple(bandwidth * f for f in BANDWIDTH_FACTORS),
                              features=options.rff_features, seed=options.seed)
    plan = MmdPlan(center=center, scale=scale, features=rff, rate=_mmd_rate(first.rows, options),
                   keep_rows=options.permutation_max_rows if exact else 0)
    if first.mmd_selected is not None and plan.rate == rate:
        second = replay_mmd(first.mmd_selected, plan, source.numeric_names)
        first.mmd_selected = None  # mapped: free the rows before the profile is built
    else:
        log.info("reading the reference again for MMD (%.3g of its rows)", plan.rate)
        second = _accumulate(source, source.numeric_names, options, tables=False, mmd=plan, embedder=embed)
    assert second.rff_sum is not None
    sampled = rff.transform(sample).astype(np.float64)
    categories, id_split = kept_categories(first.categories, first.id_selection, source.ids, options.max_categories)
    profile = ReferenceProfile(
        dtypes=dict(source.dtypes), numeric_names=source.numeric_names, rows=first.rows, sha256=source.sha256(),
        seed=options.seed, sketches=first.sketches,
        edges=np.array([decile_edges(s) for s in first.sketches]).reshape(len(first.sketches), 11),
        nan_share=first.nan_share(), categories=categories,
        mmd_space=space, center=center, scale=scale,
        features=rff, mean_embedding=second.rff_sum / max(second.mmd_rows, 1),
        covariance=np.cov(sampled, rowvar=False) if len(sampled) > 1 else np.zeros((rff.size, rff.size)),
        mmd_rows=second.mmd_rows)
    profile.seen = {name: SeenValues.of(Counter(first.categories.get(name, {})) + Counter(first.id_selection.get(
        name, {}))) for name in source.categorical_names}  # every row's values, before any id is folded away
    profile.extra["layout"] = source.layout
    if id_split:  # id features cut to their kept ids: which values chose them, which are tested
        profile.extra["id_split"] = {"share": options.id_selection_share, "features": id_split}
    if not exact:
        return profile.sketched(options.sketch)
    profile.extra["raw_reference"] = second.kept  # for the permutation tests
    return profile


def make_periodic(reference: str | Path, *, options: DriftOptions, embed_onnx: Path | None = None,
                  embed_output: str | None = None, model: Path | None = None) -> dict[str, ReferenceProfile]:
    """A profile per `options.period` label the reference's `options.timestamp` holds (sketched, as saved): two
    passes over the reference per label, so 14 for weekdays."""
    if options.period == "none" or not options.timestamp:
        raise InputError("--period/--timestamp", expected="a period and the timestamp column that sets it",
                         found=f"period {options.period!r}, timestamp {options.timestamp!r}")
    source = open_source(reference, ids=options.ids, exclude=(options.timestamp,))
    counts = source.period_counts(options.timestamp, options.period)
    log.info("a profile per %s: %s", options.period, dict(counts))
    return {label: make_profile(reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output,
                                model=model, rows_of=PeriodRows(options.period, options.timestamp, label))
            for label in counts}


def load_reference(path: str | Path, current: str | Path) -> ReferenceProfile:
    """The saved profile at `path`; of a periodic one, the profile of the period every row of `current` (the
    whole data set, not a shard) falls in: a night spanning several periods is an `InputError`."""
    periods = periods_of(path)
    if periods is None:
        return load_profile(path)
    counts = open_source(current, exclude=(periods.timestamp,)).period_counts(periods.timestamp, periods.period)
    label = single_label(counts, column=periods.timestamp, source=str(current), period=periods.period)
    log.info("judging the %s %s against its own profile", periods.period, label)
    return load_profile(path, period=label)


def check_schema(reference_dtypes: dict[str, str], current: Source, *, reference_source: str) -> None:
    """Missing or extra columns and dtype changes are bad input (the step could not compare like with like)."""
    missing = [c for c in reference_dtypes if c not in current.dtypes]
    extra = [c for c in current.dtypes if c not in reference_dtypes]
    if missing or extra:
        raise InputError(current.location, field="columns",
                         expected=f"the reference's columns ({reference_source})",
                         found=f"missing {missing[:10]}, extra {extra[:10]}")
    for column, dtype in reference_dtypes.items():
        if current.dtypes[column] != dtype:
            raise InputError(current.location, field=column, expected=f"dtype {dtype} (as in the reference)",
                             found=f"dtype {current.dtypes[column]}")


def summarise_current(profile: ReferenceProfile, current: str | Path, *, options: DriftOptions = _DEFAULTS,
                      embed_onnx: Path | None = None, embed_output: str | None = None, files: tuple[str, ...] = (),
                      rows: int | None = None) -> SideStats:
    """One streamed pass over `current` (or its `files`; `rows`: the whole data set's rows, which sets the
    MMD share) against the profile: what `decide` needs."""
    layout = profile.extra.get("layout", {})
    source = open_source(current, files=files, feature_axes=layout.get("feature_axes"), ids=layout.get("ids", ()),
                         exclude=layout.get("exclude", ()))
    check_schema(profile.dtypes, source, reference_source=str(profile.extra.get("source", "the reference")))
    embed = None
    if profile.mmd_space != "features":
        if embed_onnx is None:
            raise InputError("--embed-onnx", expected=f"the model the profile embedded with ({profile.mmd_space})",
                             found="none")
        embed = embedder(embed_onnx, embed_output or profile.mmd_space.split(":", 1)[1], source)
    keep = options.permutation_max_rows if profile.extra.get("raw_reference") is not None else 0
    plan = MmdPlan(center=profile.center, scale=profile.scale, features=profile.features, keep_rows=keep,
                   rate=_mmd_rate(source.count_rows() if rows is None else rows, options))
    stats = _accumulate(source, profile.numeric_names, options, edges=profile.edges, mmd=plan, embedder=embed)
    stats.extra.update(sha256=source.sha256(), location=str(current))
    return stats


def drift_gate(*, reference: str | Path, current: str | Path, options: DriftOptions = _DEFAULTS,
               embed_onnx: Path | None = None, embed_output: str | None = None,
               model: Path | None = None) -> DriftResult:
    """Compare `current` with `reference` (raw data or a saved profile). `model` (default: `embed_onnx`) is the
    artifact the verdict is about, so that promote can match it to the file it promotes."""
    from_profile = is_profile(reference)
    log.info("loading reference%s and current data", " profile" if from_profile else "")
    profile = load_reference(reference, current) if from_profile else make_profile(
        reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output, exact=True, model=model)
    profile.extra.setdefault("source", str(reference))
    cur = summarise_current(profile, current, options=options, embed_onnx=embed_onnx, embed_output=embed_output)
    subject_path = model or embed_onnx
    return decide(profile, cur, options=options, from_profile=from_profile, current=str(current),
                  subject_path=subject_path)


def decide(profile: ReferenceProfile, cur: SideStats, *, options: DriftOptions, from_profile: bool, current: str,
           subject_path: Path | None = None) -> DriftResult:
    """The verdict from the reference profile and the current side's (merged) statistics."""
    if cur.rows == 0:
        raise InputError(current, expected="at least one row", found="none")
    rng = np.random.default_rng(options.seed)
    log.info("KS on %d numeric and chi-square on %d categorical features", len(profile.numeric_names),
             len(profile.categories))
    new_ids = {name: new_values(seen, cur.categories.get(name, {}), per_row=_per_row(seen, profile.rows, cur, name))
               for name, seen in profile.seen.items()}
    table = _feature_tests(profile, cur, options, new_ids)
    pvalues = np.array([np.nan if row["pvalue"] is None else row["pvalue"] for row in table], dtype=np.float64)
    testable = ~np.isnan(pvalues)
    adjusted = np.full(pvalues.shape, np.nan)
    adjusted[testable] = ks.adjust(pvalues[testable], options.correction)
    for row, adj in zip(table, adjusted, strict=True):
        row["adjusted_pvalue"] = None if np.isnan(adj) else float(adj)
        row["drifted"] = bool(not np.isnan(adj) and adj < options.alpha_ks and row["effect"] >= options.min_effect)
    drifted = [row for row in table if row["drifted"]]
    table.sort(key=lambda r: (not r["drifted"], -(r["effect"] or 0.0)))
    ks_error = max((r.get("ks_error", 0.0) for r in table), default=0.0)

    log.info("MMD² in %s space", profile.mmd_space)
    mmd_value, mmd_p, mmd_method = _mmd(profile, cur, options, rng)
    shares = cur.nan_share()
    nan_changes = {n: abs(shares.get(n, 0.0) - share) for n, share in profile.nan_share.items()}
    worst_nan = max(nan_changes.items(), key=lambda kv: kv[1], default=("", 0.0))
    ks_drift, mmd_drift = bool(drifted), mmd_p < options.alpha_mmd
    untestable = [row for row in table if "untestable" in row]
    checks = [
        Check("nan_share", passed=worst_nan[1] <= options.nan_tolerance, value=worst_nan[1],
              limit=options.nan_tolerance, severity="warn",
              detail=f"largest change in the share of missing or non-finite values: {worst_nan[0]!r} "
                     f"({worst_nan[1]:.3f})" if worst_nan[0] else "no features"),
        Check("ks_drift", passed=not ks_drift, value=len(drifted), limit=0, severity="warn",
              detail=(f"{len(drifted)}/{len(table)} features drifted (adjusted p < {options.alpha_ks}, effect ≥ "
                      f"{options.min_effect}): " + ", ".join(r["feature"] for r in table[:10] if r["drifted"]))
              if drifted else f"no feature drifted among {len(table)}"),
        Check("mmd_drift", passed=not mmd_drift, value=mmd_p, limit=options.alpha_mmd, severity="warn",
              detail=f"MMD² {mmd_value:.3g} in {profile.mmd_space} space, p = {mmd_p:.4g} ({mmd_method})"),
        Check("joint_drift", passed=not (ks_drift and mmd_drift), value=float(ks_drift and mmd_drift), limit=0,
              detail="both KS and MMD detect drift" if ks_drift and mmd_drift else "not both"),
        # what the gate could not judge is never a pass: a column with no finite value tonight, or too few rows
        # for any distance to be significant, says nothing about drift
        Check("testable", passed=not untestable, value=len(untestable), limit=0,
              detail="could not judge " + "; ".join(f"{r['feature']!r} ({r['untestable']})" for r in untestable[:10])
              if untestable else f"every one of {len(table)} features judged"),
        _new_ids_check(profile, new_ids, alpha=options.alpha_ks),
    ]
    subject = Subject(
        artifact=str(subject_path) if subject_path else current,
        sha256=sha256_file(subject_path) if subject_path else str(cur.extra.get("sha256", "")),
        data={"reference": profile.sha256, "current": str(cur.extra.get("sha256", ""))},
    )
    details = DriftDetails(
        seed=options.seed, options=options.judged_settings(), reference_from_profile=from_profile,
        ks_error_bound=ks_error,
        rows=SideRows(reference=profile.rows, current=cur.rows),
        mmd=MmdDetails(value=mmd_value, pvalue=mmd_p, method=mmd_method, space=profile.mmd_space,
                       bandwidths=tuple(profile.features.bandwidths),
                       rows=SideRows(reference=profile.mmd_rows, current=cur.mmd_rows)),
        constant_features=tuple(n for n, e in zip(profile.numeric_names, profile.edges, strict=True) if e[0] == e[-1]),
        features=tuple(table[:200]), period=profile.extra.get("period"),
    )
    verdict = Verdict.from_checks(STEP, checks, subject=subject, details=details)
    return DriftResult(verdict=verdict, details=details, features=table, coverage=cur.coverage_shares(),
                       profile=profile)


def _per_row(seen: SeenValues, reference_rows: int, cur: SideStats, name: str) -> int:
    """Values per row of a categorical feature (an N-D id array holds several), the larger of the two sides."""
    current = sum(cur.categories.get(name, {}).values())
    return max(1, math.ceil(seen.values / max(reference_rows, 1)), math.ceil(current / max(cur.rows, 1)))


def _new_ids_check(profile: ReferenceProfile, found: Mapping[str, NewValues], *, alpha: float) -> Check:
    """`new_ids` (warn): a value the reference never saw takes more of tonight than chance allows (new_ids.py),
    Bonferroni over the categorical features. A profile without the set of seen values (v2/v3) cannot judge it."""
    if profile.categories and not profile.seen:
        return Check("new_ids", passed=False, value=None, limit=0, severity="warn",
                     detail="not judged: the profile holds no set of the values its reference saw (made before v4; "
                            "rebuild it with `skewgate drift profile`)")
    flagged = {name: new for name, new in found.items() if min(1.0, new.pvalue * len(found)) < alpha}
    if not flagged:
        newest = max(found.items(), key=lambda kv: kv[1].share, default=None)
        return Check("new_ids", passed=True, value=0, limit=0, severity="warn",
                     detail=f"no new value beyond chance in {len(found)} categorical feature(s)" + (
                         f"; most new: {newest[0]!r} ({newest[1].share:.2%} of tonight's values unseen, "
                         f"reference's Good–Turing estimate {newest[1].good_turing:.2%})"
                         if newest and newest[1].share > 0 else ""))
    parts = []
    for name, new in list(flagged.items())[:5]:
        value, count = new.top[0]
        sampled = "" if new.checked_share >= 1 else f", {new.checked_share:.0%} of the reference's values checked"
        parts.append(f"{name!r}: {value!r} {count:,} times, never in the reference (p = {new.pvalue:.3g}); "
                     f"{new.share:.2%} of tonight's values unseen (Good–Turing expects {new.good_turing:.2%}{sampled})")
    return Check("new_ids", passed=False, value=len(flagged), limit=0, severity="warn", detail="; ".join(parts))


def _feature_tests(profile: ReferenceProfile, cur: SideStats, options: DriftOptions,
                   new_ids: Mapping[str, NewValues]) -> list[FeatureTest]:
    """KS per numeric feature, chi-square per categorical one. A KS statistic from sketches is within `ks_error`
    of the exact one, so its p-value and effect are those of the least D it can be (at least `statistic` −
    `ks_error`, `ks_bounds`): what is pushed and shown is what is decided on, and the p-value is valid whatever
    the sketches hide. `detectable`: the smallest effect the feature could be flagged at, alone among the tested
    features (its sample size, the correction and the effect floor)."""
    rows: list[FeatureTest] = []
    sizes: list[tuple[str, int, float] | None] = []  # per row: (test, n or cells, m or values); None: untestable
    positions = profile.extra.get("layout", {}).get("positions", {})
    tests = len(profile.numeric_names) + len(profile.categories)
    pairs = list(zip(profile.sketches, cur.sketches, strict=True))
    bounds = map_features(lambda pair: ks_bounds(*pair), pairs)  # exact KS at 100k × 512: half the time on 2 cores
    for name, (ref_sketch, cur_sketch), (d, error, judged) in zip(profile.numeric_names, pairs, bounds, strict=True):
        # pooled positions of one sample are not independent: the p-value counts samples, not values
        per = positions.get(name, 1)
        n, m = ref_sketch.n // per, cur_sketch.n // per
        row: FeatureTest = {"feature": name, "kind": "numeric", "test": "ks", "statistic": _num(d), "pvalue": None,
                            "effect": _num(judged) or 0.0, "ks_error": error, "reference_n": n, "current_n": m}
        reason = _untestable(n, m, level=options.alpha_ks / max(tests, 1))
        if reason:
            row["untestable"] = reason
        else:
            row["pvalue"], row["log10_pvalue"] = _floored(ks.ks_pvalue(judged, n, m), judged, n, m)
        rows.append(row)
        sizes.append(None if reason else ("ks", n, m))
    for name, counts in profile.categories.items():
        current = fold_current(counts, cur.categories.get(name, {}))
        stat, p, v, cells = homogeneity(counts, current, min_expected=options.min_expected)
        # the values the reference never held, most frequent first (from the profile's set: before any folding)
        new = [value for value, _ in new_ids[name].top] if name in new_ids else sorted(set(current) - set(counts))
        pvalue, log10 = _floored(p)
        rows.append({"feature": name, "kind": "categorical", "test": "chi2", "statistic": stat, "pvalue": pvalue,
                     "log10_pvalue": log10, "effect": v, "cells": cells, "new_categories": new[:20]})
        sizes.append(("chi2", cells, float(sum(counts.values()) + sum(current.values()))))
    # a lone drifted feature's p-value must reach alpha / tests, under Benjamini-Hochberg as under Bonferroni
    level = options.alpha_ks / max(sum(1 for row in rows if row["pvalue"] is not None), 1)
    for row, size in zip(rows, sizes, strict=True):
        row["detectable"] = None if size is None else _detectable(*size, level=level, floor=options.min_effect)
    return rows


def _untestable(n: int, m: int, *, level: float) -> str:
    """Why a KS test of `n` reference and `m` current samples cannot judge (empty when it can): a side without
    a finite value, or sides so small that a distance of `TESTABLE_D` would not reach `level` (alpha over every
    test: the least a lone drifted feature needs). One current row can reach a small p alone (when it lies
    beyond the reference's range), but it says nothing about a distribution."""
    if n == 0 or m == 0:
        return f"no finite value in the {'reference' if n == 0 else 'current data'}"
    if ks.ks_pvalue(TESTABLE_D, n, m) > level:
        return (f"{n:,} reference and {m:,} current samples: too few for a distance of {TESTABLE_D:g} to reach "
                f"p ≤ {level:.3g}")
    return ""


def _floored(p: float, d: float | None = None, n: int = 0, m: int = 0) -> tuple[float, float | None]:
    """(p, log10 p): p no lower than `P_FLOOR`, with its exponent where it lies below the floor (a KS p from the
    leading term of the Kolmogorov tail, 2·exp(−2x²); a chi-square one is only known to be below: None)."""
    if p >= P_FLOOR:
        return float(p), None
    if d is None or not n or not m:
        return P_FLOOR, None
    return P_FLOOR, math.log10(2.0) - 2.0 * d * d * n * m / (n + m) / math.log(10.0)


def _detectable(test: str, first: int, second: float, *, level: float, floor: float) -> float | None:
    """KS: the least D (of `first` and `second` samples) with p ≤ `level`; chi-square: the least Cramér's V of
    `first` cells over `second` values. Never below the effect floor."""
    if test == "ks":
        return max(floor, ks.critical_d(level, first, int(second)))
    return smallest_v(first, second, alpha=level, floor=floor)


def _num(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _mmd(profile: ReferenceProfile, cur: SideStats, options: DriftOptions,
         rng: np.random.Generator) -> tuple[float, float, str]:
    z_ref, z_cur = profile.extra.get("raw_reference"), cur.kept
    if z_ref is not None and z_cur is not None:
        if len(z_ref) + len(z_cur) <= options.exact_max_rows:
            value, p = mmd_exact(z_ref, z_cur, profile.features.bandwidths, permutations=options.permutations,
                                 rng=rng)
            return value, p, f"exact kernel matrix, {options.permutations} permutations"
        value, p = mmd_rff(z_ref, z_cur, profile.features, permutations=options.permutations, rng=rng)
        return value, p, f"random Fourier features (D={profile.features.size}), {options.permutations} permutations"
    if cur.rff_sum is None or cur.mmd_rows == 0:
        raise InputError(cur.extra.get("location", "current"), expected="rows for MMD", found="none")
    value = float(np.sum((cur.rff_sum / cur.mmd_rows - profile.mean_embedding) ** 2))
    p = gaussian_null_pvalue(value, profile.covariance, profile.mmd_rows, cur.mmd_rows,
                             draws=max(options.permutations, 1000), rng=rng)
    return value, p, (f"random Fourier features (D={profile.features.size}), streamed mean embeddings of "
                      f"{profile.mmd_rows:,} and {cur.mmd_rows:,} rows, Gaussian null")
