"""The entries the CLI and the KFP components call, files and options in, a recorded (and signed) verdict out: the
gate (`run`: the drift check published — pictures, the reference profile promote records with the model version,
an optional push to Prometheus) and the nightly check of a serving-log snapshot against the champion's profile
(`run_nightly`; fanned out: `plan_nightly`, `partial_statistics` per shard, then `run_nightly` with the
partials). `write_profile` (`skewgate drift profile`) and the fan-out's plan and shards record nothing.

What each entry records is evaluated by `gate_in_run` / `night_in_run`, given the step run and, for the night, the
registry (`NightlyRegistry`, a `ChampionReader` that can also tag): `run_nightly` reads and tags MLflow's through
its step run; the unit tests hand fakes to these two.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import BackendError, InputError
from skewgate.common.io import sha256_file
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.registry import Champion, ChampionReader, check_tagged_file, download_tagged
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.verdict import Verdict
from skewgate.drift.stats.categories import MIN_EXPECTED, SELECTION_SHARE
from skewgate.drift.stats.periods import Period
from skewgate.drift.stats.series import SeriesOptions
from skewgate.drift.stats.sketch import DEFAULT_CAPACITY
from skewgate.drift.stats.source import BATCH_ROWS

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun
    from skewgate.drift.core import DriftResult
    from skewgate.drift.stats.ks import Correction
    from skewgate.drift.stats.profile import ReferenceProfile

log = logging.getLogger(__name__)
STEP, NIGHTLY_STEP = "drift", "nightly-drift"
PROFILE_URI_TAG, PROFILE_SHA_TAG, NIGHTLY_TAG = conv.PROFILE_URI_TAG, conv.PROFILE_SHA_TAG, conv.NIGHTLY_TAG
HEATMAP_NAME, HTML_NAME = "coverage_heatmap.png", "drift_report.html"
# the options that say how the gate publishes, not how it judges: left out of what a verdict records
PUBLISHING = ("series", "pushgateway_url", "pushgateway_model", "heatmap_name", "html_name")


@dataclass(frozen=True, kw_only=True)
class DriftOptions:
    """Every default of `skewgate drift` (and `drift profile`) and `drift_op` lives here: the statistics'
    thresholds and knobs (the documented defaults; core.py judges with them and a verdict records them), then how
    the gate publishes (`PUBLISHING`)."""

    alpha_ks: float = 0.05
    alpha_mmd: float = 0.05
    correction: Correction = "bh"
    min_effect: float = 0.05  # KS D (or Cramér's V) below this is never drift, however small the p-value
    nan_tolerance: float = 0.05  # allowed change in a feature's NaN share
    permutations: int = 200
    exact_max_rows: int = 2000  # pooled rows up to which MMD uses the exact kernel matrix
    permutation_max_rows: int = 25_000  # rows per side up to which MMD keeps them for a permutation test
    mmd_max_rows: int = 131_072  # rows per side behind MMD's mean embeddings (a seeded share beyond)
    sample_rows: int = 8_192  # reference rows sampled for the bandwidth and the random features' covariance
    rff_features: int = 510
    exact_rows: int = 131_072  # rows per side up to which KS keeps every value (exact)
    sketch_capacity: int = DEFAULT_CAPACITY  # values per streamed quantile sketch beyond that
    sketch: int = 4096  # quantiles kept per feature in a saved profile
    batch_rows: int = BATCH_ROWS
    feature_axes: tuple[tuple[str, int], ...] = ()  # (array, axis): an N-D array's feature axis (else per layout)
    ids: tuple[str, ...] = ()  # integer columns/arrays holding ids: tested as categories
    max_categories: int = 1000  # an id feature keeps its most frequent ids, the rest count as "(other)"
    id_selection_share: float = SELECTION_SHARE  # reference rows that rank the ids; the others are tested
    min_expected: float = MIN_EXPECTED  # a category expecting fewer on the smaller side is pooled into "(rare)"
    timestamp: str = ""  # a column that is not a feature: when each row was logged (sets its period)
    period: Period = "none"  # a saved profile holds one profile per period of `timestamp` (stats/periods.py)
    seed: int = 0
    # with a series state (`run`'s `series_state`): one night of an anytime-valid series (stats/series.py)
    series: SeriesOptions = field(default_factory=SeriesOptions)
    pushgateway_url: str = ""  # push the figures to this Prometheus Pushgateway (empty: no push)
    pushgateway_model: str = "skewgate"  # the `model` label of the pushed series
    # the names the heatmap and the HTML report are logged under in the step run (KFP output paths have none; the
    # CLI's are the files' own: empty)
    heatmap_name: str = HEATMAP_NAME
    html_name: str = HTML_NAME

    def judged_settings(self) -> dict[str, Any]:
        """What a verdict says it was judged with (`Verdict.judged_with`, and its details' `options`): the
        statistics' options, not how the gate publishes."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in PUBLISHING}


DEFAULTS = DriftOptions()  # a night judges at these


@dataclass(frozen=True, kw_only=True)
class NightlyOptions:
    """Every default of the nightly check's components (`nightly_drift_op`, the fan-out's plan and merge) lives
    here; its statistics are `DriftOptions`' defaults, and the registered model, the snapshot and the date are
    `run_nightly`'s arguments."""

    alias: str = DEFAULT_ALIAS  # the version whose drift profile is the reference, tagged with the night
    series: SeriesOptions = field(default_factory=SeriesOptions)  # the anytime-valid series over the nights
    pushgateway_url: str = ""  # push the night's figures here, labelled with the model's name (empty: no push)
    heatmap_name: str = HEATMAP_NAME  # the names the pictures are logged under in the step run
    html_name: str = HTML_NAME


class NightlyRegistry(ChampionReader, Protocol):
    """What the nightly run needs of the registry: read the champion, and tag it with the night's result."""

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None: ...


def run(*, reference: str | Path, current: str | Path, options: DriftOptions, tracking: TrackingOptions,
        model: str | Path | None = None, embed_onnx: Path | None = None, embed_output: str | None = None,
        heatmap: str | Path | None = None, html: str | Path | None = None, profile_out: str | Path | None = None,
        series_state: str | Path | None = None) -> StepResult:
    """Drift of `current` against `reference` (data, or a drift profile) inside the step's MLflow run, published
    (`gate_in_run`): `model` is the artifact the verdict is about, `embed_onnx`'s `embed_output` the embedding MMD
    runs on; the heatmap, the HTML report and the reference profile go where given. Never raises: `error`
    verdict."""
    return evaluate_and_record(
        STEP, lambda step_run: gate_in_run(
            step_run, reference=reference, current=current, options=options, model=model, embed_onnx=embed_onnx,
            embed_output=embed_output, heatmap=heatmap, html=html, profile_out=profile_out,
            series_state=series_state),
        tracking, settings=options, inputs={"reference": reference, "current": current, "model": model,
                                            "embed_onnx": embed_onnx, "series_state": series_state})


def gate_in_run(step_run: StepRun | None, *, reference: str | Path, current: str | Path, options: DriftOptions,
                model: str | Path | None = None, embed_onnx: Path | None = None, embed_output: str | None = None,
                heatmap: str | Path | None = None, html: str | Path | None = None,
                profile_out: str | Path | None = None, series_state: str | Path | None = None) -> Verdict:
    """The gate, published. With `profile_out`, the reference profile is written there and, with tracking,
    logged to the step run, whose URI and digest the verdict asks promote to tag on the model version
    (`registry_tags`); with `options.pushgateway_url`, the figures are pushed for Prometheus. With `series_state`
    (a JSON file, read when it exists and rewritten), the check is one night of an anytime-valid series against
    the reference (series.py): `series.anytime_valid` joins tonight's checks."""
    from skewgate.drift.core import drift_gate, make_periodic
    from skewgate.drift.stats.profile import save_periodic, save_profile
    from skewgate.drift.stats.series import judge, load_state, save_state

    result = drift_gate(reference=reference, current=current, options=options, embed_onnx=embed_onnx,
                        embed_output=embed_output, model=Path(model) if model else None)
    if series_state is not None:
        key = sha256_file(reference) if result.details.reference_from_profile else result.profile.sha256
        judged, state = judge(result.verdict, result.features, load_state(series_state), profile=key,
                              options=options.series, date=datetime.now(UTC).isoformat(timespec="seconds"),
                              min_effect=options.min_effect, profiles=profiles_behind(result))
        save_state(state, series_state)
        result = dataclasses.replace(result, verdict=judged)
    # after the series: the report shows the verdict as judged, `series.anytime_valid` included
    publish(result, step_run, heatmap=heatmap, html=html, heatmap_name=options.heatmap_name,
            html_name=options.html_name)
    verdict = result.verdict.judged_with(options)
    if options.pushgateway_url:
        pushed = push(result, gateway=options.pushgateway_url, model=options.pushgateway_model)
        verdict = dataclasses.replace(verdict, details={**verdict.details, "pushgateway": pushed})
    if profile_out is None:
        return verdict
    if options.period != "none":  # a profile per period, for the nights (tonight was judged against them all)
        save_periodic(make_periodic(reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output,
                                    model=Path(model) if model else None),
                      profile_out, period=options.period, timestamp=options.timestamp)
    else:
        save_profile(result.profile.sketched(options.sketch), profile_out)
    if step_run is None:
        return verdict
    uri = step_run.log_artifact_as(profile_out, "reference.profile", "profile") + "/reference.profile"
    tags = {PROFILE_URI_TAG: uri, PROFILE_SHA_TAG: sha256_file(profile_out)}
    return dataclasses.replace(verdict, registry_tags=tags)


def profiles_behind(result: DriftResult) -> int:
    """The profiles a series against this reference is judged with: a periodic profile's periods, else 1."""
    return len((result.profile.extra.get("period") or {}).get("labels", ())) or 1


def publish(result: DriftResult, step_run: StepRun | None, *, heatmap: str | Path | None, html: str | Path | None,
            heatmap_name: str = HEATMAP_NAME, html_name: str = HTML_NAME) -> None:
    """Write the heatmap and HTML report where asked; with tracking, log them (under the given names; empty: the
    files' own) and the per-feature table to the step run."""
    from skewgate.common import publishing as shared
    from skewgate.drift.outputs.report import heatmap_png, report_html

    shared.publish(step_run, tables={"features.json": [dict(row) for row in result.features]}, outputs=[
        (heatmap, heatmap_name, lambda path: heatmap_png(result, path)),
        (html, html_name, shared.write_text(lambda: report_html(result)))])


def write_profile(reference: str | Path, out: str | Path, *, options: DriftOptions = DEFAULTS,
                  embed_onnx: Path | None = None, embed_output: str | None = None) -> dict[str, ReferenceProfile]:
    """`skewgate drift profile`: the reference profile of `reference`, sketched to `options.sketch` values per
    feature, saved to `out`; with `options.period`, one per period (`save_periodic`). Returns them by label
    ("" for the one profile of a data set)."""
    from skewgate.drift.core import make_periodic, make_profile
    from skewgate.drift.stats.profile import save_periodic, save_profile

    if options.period != "none":
        profiles = make_periodic(reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output)
        save_periodic(profiles, out, period=options.period, timestamp=options.timestamp)
        return profiles
    profile = make_profile(reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output,
                           exact=False)
    save_profile(profile, out)
    return {"": profile}


def require_tracking(step_run: StepRun | None) -> StepRun:
    """The step run, or an `InputError`: the nightly run reads its profile from the registry."""
    if step_run is None:
        raise InputError("tracking_uri", expected="an MLflow tracking URI (the profile lives in the registry)",
                         found="none")
    return step_run


def champion(registry: ChampionReader, *, model_name: str, alias: str) -> Champion:
    """The `alias` version (looked up, not downloaded), which must carry a drift profile (recorded at
    promotion)."""
    found = registry.fetch(model_name, alias)
    if found is None:
        raise InputError(model_name, field=f"@{alias}", expected="a model version with this alias", found="none")
    if PROFILE_URI_TAG not in found.tags:
        raise InputError(f"{model_name} v{found.version}", field=PROFILE_URI_TAG,
                         expected="a drift profile recorded at promotion", found="no such tag")
    return found


def _check_profile(path: str | Path, found: Champion) -> None:
    """The profile file must be the one whose SHA-256 is tagged on the version."""
    check_tagged_file(path, found, sha_tag=PROFILE_SHA_TAG)


def _download_profile(registry: ChampionReader, found: Champion, directory: Path) -> Path:
    return download_tagged(registry, found, uri_tag=PROFILE_URI_TAG, sha_tag=PROFILE_SHA_TAG, directory=directory)


def fetch_profile(registry: ChampionReader, *, model_name: str, alias: str, directory: Path) -> tuple[str, Path]:
    """(version, path): the `alias` version's drift profile, checked against the SHA-256 tagged with it."""
    found = champion(registry, model_name=model_name, alias=alias)
    return found.version, _download_profile(registry, found, directory)


def run_nightly(*, model_name: str, current: str | Path, options: NightlyOptions, tracking: TrackingOptions,
                run_date: str = "", heatmap: str | Path | None = None, html: str | Path | None = None,
                partials: Sequence[str] = (), profile: str = "", series_in: str | Path | None = None,
                series_out: str | Path | None = None) -> StepResult:
    """The night's drift of `current` against the `options.alias` version of `model_name` (`night_in_run`), inside
    the step's MLflow run, whose registry it reads and tags (so tracking is required: without it, an `error`
    verdict). Never raises: `error` verdict."""

    def evaluate(step_run: StepRun | None) -> Verdict:
        from skewgate.common.mlflow_log import MlflowRegistry

        return night_in_run(step_run, MlflowRegistry(require_tracking(step_run)), model_name=model_name,
                            current=current, options=options, run_date=run_date, heatmap=heatmap, html=html,
                            partials=partials, profile=profile, series_in=series_in, series_out=series_out)

    return evaluate_and_record(NIGHTLY_STEP, evaluate, tracking, settings=options,
                               inputs={"current": current, "reference": profile, "series_in": series_in})


def night_in_run(step_run: StepRun | None, registry: NightlyRegistry, *, model_name: str, current: str | Path,
                 options: NightlyOptions, run_date: str = "", heatmap: str | Path | None = None,
                 html: str | Path | None = None, partials: Sequence[str] = (), profile: str = "",
                 series_in: str | Path | None = None, series_out: str | Path | None = None) -> Verdict:
    """Drift of `current` against the `alias` version's profile; tags that version with the status, the date
    and (with tracking) the step run; with a Pushgateway URL, pushes the figures for Prometheus (labelled
    with `model_name`). Fanned out: the `partials` of the shards (`partial_statistics`) against the `profile`
    they were computed with (`plan_nightly`), merged.

    Tonight's checks are joined by `series.anytime_valid` (series.py): the running e-value over every night
    against this profile, read back from `series_in` when given, else from the version's tags (the state is
    tagged on it each night, and written to `series_out` when given); none, or one for another profile,
    starts a new series."""
    from skewgate.common.verdict import asdict_shallow, plain_details
    from skewgate.drift.core import NightlyDetails, PushedNightlyDetails, drift_gate
    from skewgate.drift.stats.series import SeriesState, judge, load_state, save_state

    found = champion(registry, model_name=model_name, alias=options.alias)
    with tempfile.TemporaryDirectory() as tmp:
        if partials:
            _check_profile(profile, found)  # the champion may have changed since the plan step
            result = merge_partials(profile, partials, current=str(current))
        else:
            result = drift_gate(reference=_download_profile(registry, found, Path(tmp)), current=current)
    # KFP resolves the schedule-time placeholder only for scheduled runs; otherwise the literal arrives.
    date = run_date if run_date and not run_date.startswith("{{") else datetime.now(UTC).isoformat(timespec="seconds")
    previous = load_state(series_in) if series_in else SeriesState.from_tags(found.tags)
    judged, state = judge(result.verdict, result.features, previous, profile=found.tags[PROFILE_SHA_TAG],
                          options=options.series, date=date, min_effect=DEFAULTS.min_effect,
                          profiles=profiles_behind(result))
    # the pictures and the report show the night as judged: the series' check, which decides, among the others
    publish(dataclasses.replace(result, verdict=judged), step_run, heatmap=heatmap, html=html,
            heatmap_name=options.heatmap_name, html_name=options.html_name)
    if series_out:
        save_state(state, series_out)
    tags = {NIGHTLY_TAG: nightly_tag(judged.status, date, step_run.run_id if step_run is not None else ""),
            **state.tags()}
    registry.set_tags(model_name, found.version, tags)
    base = asdict_shallow(result.details)
    details: NightlyDetails
    if options.pushgateway_url:
        details = PushedNightlyDetails(**base, model_version=found.version, run_date=date,
                                       shards=len(partials) or 1, series=judged.details["series"],
                                       pushgateway=push(dataclasses.replace(result, verdict=judged),
                                                        gateway=options.pushgateway_url, model=model_name))
    else:
        details = NightlyDetails(**base, model_version=found.version, run_date=date, shards=len(partials) or 1,
                                 series=judged.details["series"])
    # nightly judges at the defaults
    return dataclasses.replace(judged, details=plain_details(details)).judged_with(DEFAULTS)


def nightly_tag(status: str, date: str, run_id: str = "") -> str:
    """The value of `NIGHTLY_TAG`: the night's status and date, and its step run when it was tracked."""
    return f"{status} {date}" + (f" run {run_id}" if run_id else "")


def plan_nightly(*, model_name: str, snapshot: str, profile_out: str | Path, options: NightlyOptions,
                 tracking: TrackingOptions, registry: ChampionReader | None = None) -> int:
    """The fan-out's first task: copy the `options.alias` version's profile to `profile_out`, once for every
    shard, and return the snapshot's rows (from the Parquet footers), which set the share of rows MMD uses as one
    pass would. `registry`: MLflow's at `tracking.uri` unless given; a read, so no step run is created."""
    from skewgate.drift.stats.source import open_source

    if registry is None:
        from skewgate.common.mlflow_log import RegistryChampions, connect

        registry = RegistryChampions.of(connect(tracking.uri, experiment=tracking.experiment,
                                                deadline_s=tracking.deadline_s))
    with tempfile.TemporaryDirectory() as tmp:
        _, path = fetch_profile(registry, model_name=model_name, alias=options.alias, directory=Path(tmp))
        shutil.copyfile(path, profile_out)
    return open_source(snapshot).count_rows()


def partial_statistics(profile: str, snapshot: str, *, shard: int, shards: int, rows: int, out: str) -> Path:
    """One shard's statistics against the profile: files `shard`, `shard + shards`, … of the snapshot."""
    from skewgate.drift.core import load_reference, summarise_current
    from skewgate.drift.stats.source import open_source
    from skewgate.drift.stats.stream import empty_side, save_partial

    files = open_source(snapshot).files[shard::shards]
    reference = load_reference(profile, snapshot)
    stats = summarise_current(reference, snapshot, files=files, rows=rows) if files else empty_side(
        reference.numeric_names, tuple(reference.categories), reference.features.size)
    return save_partial(stats, out)


def merge_partials(profile: str, partials: Sequence[str], *, current: str,
                   options: DriftOptions = DEFAULTS) -> DriftResult:
    """The verdict from the shards' statistics: what one pass over the whole snapshot decides."""
    from skewgate.drift.core import decide, load_reference
    from skewgate.drift.stats.source import open_source
    from skewgate.drift.stats.stream import load_partial, merge

    loaded = [load_partial(p) for p in partials]
    merged = loaded[0]
    for part in loaded[1:]:
        merged = merge(merged, part, capacity=options.sketch_capacity, exact_rows=options.exact_rows)
    merged.extra["sha256"] = open_source(current).sha256()  # of the whole snapshot, as one pass records it
    return decide(load_reference(profile, current), merged, options=options, from_profile=True, current=current)


def push(result: DriftResult, *, gateway: str, model: str) -> str:
    """Push to the gateway; an unreachable gateway is logged and recorded, not a reason to lose the verdict
    (the run still fails on drift, and the alert on a stale `last_run` timestamp fires)."""
    from skewgate.drift.outputs.alerting import push_drift_metrics

    try:
        push_drift_metrics(result.verdict, result.features, gateway=gateway, model=model)
    except BackendError as err:
        log.error("%s", err)
        return f"not pushed: {err}"
    return f"pushed to {gateway}"
