"""The entry the CLI and the KFP components call: the gate published (`run_drift`: pictures, the reference profile
promote records with the model version, an optional push to Prometheus) and the nightly check of a serving-log
snapshot against the champion's profile (`run_nightly`; fanned out: `plan_nightly`, `partial_statistics` per
shard, then `run_nightly` with the partials).

The registry is handed in (`NightlyRegistry`, a `ChampionReader` that can also tag): MLflow's is built at the
edge (component.py), the unit tests use a fake. The statistics' defaults live in `DriftOptions` (core.py).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from skewgate.common import mlflow_conventions as conv
from skewgate.common import publishing as shared
from skewgate.common.errors import BackendError, InputError
from skewgate.common.io import sha256_file
from skewgate.common.registry import ChampionReader
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.verdict import Verdict, asdict_shallow, plain_details
from skewgate.drift.core import (
    DriftDetails,
    DriftOptions,
    DriftResult,
    decide,
    drift_gate,
    make_profile,
    summarise_current,
)
from skewgate.drift.outputs.report import heatmap_png, report_html
from skewgate.drift.stats.profile import ReferenceProfile, load_profile, save_profile
from skewgate.drift.stats.series import SeriesOptions, SeriesState, judge, load_state, save_state
from skewgate.drift.stats.source import open_source
from skewgate.drift.stats.stream import empty_side, load_partial, merge, save_partial

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

log = logging.getLogger(__name__)
PROFILE_URI_TAG, PROFILE_SHA_TAG, NIGHTLY_TAG = conv.PROFILE_URI_TAG, conv.PROFILE_SHA_TAG, conv.NIGHTLY_TAG
DEFAULTS = DriftOptions()  # the statistics' defaults (core.py holds them)
SERIES_DEFAULTS = SeriesOptions()  # the anytime-valid series' defaults (series.py)


class NightlyRegistry(ChampionReader, Protocol):
    """What the nightly run needs of the registry: read the champion, and tag it with the night's result."""

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class Pictures:
    """Where the coverage heatmap and the HTML report are written (nowhere when None) and the names they are
    logged under in the step run (KFP output paths have no suffix; an empty name: the file's own)."""

    heatmap: str | Path | None = None
    html: str | Path | None = None
    heatmap_name: str = "coverage_heatmap.png"
    html_name: str = "drift_report.html"

    @classmethod
    def named_as_files(cls, *, heatmap: str | Path | None, html: str | Path | None) -> Pictures:
        """Logged under the files' own names (the CLI's user chose them)."""
        return cls(heatmap=heatmap, html=html, heatmap_name="", html_name="")


@dataclass(frozen=True, kw_only=True)
class Pushgateway:
    """Where the figures go for Prometheus (an empty `url`: nowhere) and the `model` label of the series."""

    url: str = ""
    model: str = "skewgate"


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
class Champion:
    """The `alias` version of a registered model and its tags (which hold the drift profile's URI and digest)."""

    model_name: str
    version: str
    tags: Mapping[str, str]


def publish(result: DriftResult, run: StepRun | None, *, pictures: Pictures) -> None:
    """Write the heatmap and HTML report where asked; with tracking, log them and the per-feature table to the
    step run."""
    shared.publish(run, tables={"features.json": [dict(row) for row in result.features]}, outputs=[
        (pictures.heatmap, pictures.heatmap_name, lambda path: heatmap_png(result, path)),
        (pictures.html, pictures.html_name, shared.write_text(lambda: report_html(result)))])


def run_drift(run: StepRun | None, *, reference: str | Path, current: str | Path,
              options: DriftOptions = DEFAULTS, model: str | Path | None = None,
              embed_onnx: Path | None = None, embed_output: str | None = None, pictures: Pictures = Pictures(),
              profile_out: str | Path | None = None, pushgateway: Pushgateway = Pushgateway(),
              series_state: str | Path | None = None, series: SeriesOptions = SERIES_DEFAULTS) -> Verdict:
    """The gate, published. With `profile_out`, the reference profile is written there and, with tracking,
    logged to the step run, whose URI and digest the verdict asks promote to tag on the model version
    (`registry_tags`); with `pushgateway.url`, the figures are pushed for Prometheus. With `series_state` (a
    JSON file, read when it exists and rewritten), the check is one night of an anytime-valid series against
    the reference (series.py): `series.anytime_valid` joins tonight's checks."""
    result = drift_gate(reference=reference, current=current, options=options, embed_onnx=embed_onnx,
                        embed_output=embed_output, model=Path(model) if model else None)
    publish(result, run, pictures=pictures)
    if series_state is not None:
        key = sha256_file(reference) if result.details.reference_from_profile else result.profile.sha256
        judged, state = judge(result.verdict, result.features, load_state(series_state), profile=key,
                              options=series, date=datetime.now(UTC).isoformat(timespec="seconds"))
        save_state(state, series_state)
        result = dataclasses.replace(result, verdict=judged)
    verdict = result.verdict.judged_with(options)
    if pushgateway.url:
        pushed = push(result, gateway=pushgateway.url, model=pushgateway.model)
        verdict = dataclasses.replace(verdict, details={**verdict.details, "pushgateway": pushed})
    if profile_out is None:
        return verdict
    save_profile(result.profile.sketched(options.sketch), profile_out)
    if run is None:
        return verdict
    uri = run.log_artifact_as(profile_out, "reference.profile", "profile") + "/reference.profile"
    tags = {PROFILE_URI_TAG: uri, PROFILE_SHA_TAG: sha256_file(profile_out)}
    return dataclasses.replace(verdict, registry_tags=tags)


def write_profile(reference: str | Path, out: str | Path, *, options: DriftOptions = DEFAULTS,
                  embed_onnx: Path | None = None, embed_output: str | None = None) -> ReferenceProfile:
    """`skewgate drift profile`: the reference profile of `reference`, sketched to `options.sketch` values per
    feature, saved to `out`."""
    profile = make_profile(reference, options=options, embed_onnx=embed_onnx, embed_output=embed_output,
                           exact=False)
    save_profile(profile, out)
    return profile


def require_tracking(run: StepRun | None) -> StepRun:
    """The step run, or an `InputError`: the nightly run reads its profile from the registry."""
    if run is None:
        raise InputError("tracking_uri", expected="an MLflow tracking URI (the profile lives in the registry)",
                         found="none")
    return run


def champion(registry: ChampionReader, *, model_name: str, alias: str) -> Champion:
    """The `alias` version, which must carry a drift profile (recorded at promotion)."""
    version = registry.get_alias(model_name, alias)
    if version is None:
        raise InputError(model_name, field=f"@{alias}", expected="a model version with this alias", found="none")
    tags = registry.get_tags(model_name, version)
    if PROFILE_URI_TAG not in tags:
        raise InputError(f"{model_name} v{version}", field=PROFILE_URI_TAG,
                         expected="a drift profile recorded at promotion", found="no such tag")
    return Champion(model_name=model_name, version=version, tags=tags)


def _check_profile(path: str | Path, found: Champion) -> None:
    """The profile file must be the one whose SHA-256 is tagged on the version."""
    expected, actual = found.tags.get(PROFILE_SHA_TAG), sha256_file(path)
    if actual != expected:
        raise InputError(path, field=PROFILE_SHA_TAG, expected=expected or "(none)", found=actual)


def _download_profile(registry: ChampionReader, found: Champion, directory: Path) -> Path:
    path = registry.download(found.tags[PROFILE_URI_TAG], directory)
    _check_profile(path, found)
    return path


def fetch_profile(registry: ChampionReader, *, model_name: str, alias: str, directory: Path) -> tuple[str, Path]:
    """(version, path): the `alias` version's drift profile, checked against the SHA-256 tagged with it."""
    found = champion(registry, model_name=model_name, alias=alias)
    return found.version, _download_profile(registry, found, directory)


def run_nightly(run: StepRun | None, registry: NightlyRegistry, *, model_name: str, current: str,
                alias: str = DEFAULT_ALIAS, run_date: str = "", pictures: Pictures = Pictures(),
                pushgateway: str = "", partials: Sequence[str] = (), profile: str = "",
                series: SeriesOptions = SERIES_DEFAULTS, series_in: str | Path | None = None,
                series_out: str | Path | None = None) -> Verdict:
    """Drift of `current` against the `alias` version's profile; tags that version with the status, the date
    and (with tracking) the step run; with a `pushgateway` URL, pushes the figures for Prometheus (labelled
    with `model_name`). Fanned out: the `partials` of the shards (`partial_statistics`) against the `profile`
    they were computed with (`plan_nightly`), merged.

    Tonight's checks are joined by `series.anytime_valid` (series.py): the running e-value over every night
    against this profile, read back from `series_in` when given, else from the version's tags (the state is
    tagged on it each night, and written to `series_out` when given); none, or one for another profile,
    starts a new series."""
    found = champion(registry, model_name=model_name, alias=alias)
    with tempfile.TemporaryDirectory() as tmp:
        if partials:
            _check_profile(profile, found)  # the champion may have changed since the plan step
            result = merge_partials(profile, partials, current=current)
        else:
            result = drift_gate(reference=_download_profile(registry, found, Path(tmp)), current=current)
    # KFP resolves the schedule-time placeholder only for scheduled runs; otherwise the literal arrives.
    date = run_date if run_date and not run_date.startswith("{{") else datetime.now(UTC).isoformat(timespec="seconds")
    publish(result, run, pictures=pictures)
    previous = load_state(series_in) if series_in else SeriesState.from_tags(found.tags)
    judged, state = judge(result.verdict, result.features, previous, profile=found.tags[PROFILE_SHA_TAG],
                          options=series, date=date)
    if series_out:
        save_state(state, series_out)
    tags = {NIGHTLY_TAG: nightly_tag(judged.status, date, run.run_id if run is not None else ""), **state.tags()}
    registry.set_tags(model_name, found.version, tags)
    base = asdict_shallow(result.details)
    details: NightlyDetails
    if pushgateway:
        details = PushedNightlyDetails(**base, model_version=found.version, run_date=date,
                                       shards=len(partials) or 1, series=judged.details["series"],
                                       pushgateway=push(dataclasses.replace(result, verdict=judged),
                                                        gateway=pushgateway, model=model_name))
    else:
        details = NightlyDetails(**base, model_version=found.version, run_date=date, shards=len(partials) or 1,
                                 series=judged.details["series"])
    # nightly judges at the defaults
    return dataclasses.replace(judged, details=plain_details(details)).judged_with(DEFAULTS)


def nightly_tag(status: str, date: str, run_id: str = "") -> str:
    """The value of `NIGHTLY_TAG`: the night's status and date, and its step run when it was tracked."""
    return f"{status} {date}" + (f" run {run_id}" if run_id else "")


def plan_nightly(registry: ChampionReader, *, model_name: str, alias: str, snapshot: str,
                 profile_out: str | Path) -> int:
    """The fan-out's first task: copy the `alias` version's profile to `profile_out`, once for every shard, and
    return the snapshot's rows (from the Parquet footers), which set the share of rows MMD uses as one pass
    would."""
    with tempfile.TemporaryDirectory() as tmp:
        _, path = fetch_profile(registry, model_name=model_name, alias=alias, directory=Path(tmp))
        shutil.copyfile(path, profile_out)
    return open_source(snapshot).count_rows()


def partial_statistics(profile: str, snapshot: str, *, shard: int, shards: int, rows: int, out: str) -> Path:
    """One shard's statistics against the profile: files `shard`, `shard + shards`, … of the snapshot."""
    files = open_source(snapshot).files[shard::shards]
    reference = load_profile(profile)
    stats = summarise_current(reference, snapshot, files=files, rows=rows) if files else empty_side(
        reference.numeric_names, tuple(reference.categories), reference.features.size)
    return save_partial(stats, out)


def merge_partials(profile: str, partials: Sequence[str], *, current: str,
                   options: DriftOptions = DEFAULTS) -> DriftResult:
    """The verdict from the shards' statistics: what one pass over the whole snapshot decides."""
    loaded = [load_partial(p) for p in partials]
    merged = loaded[0]
    for part in loaded[1:]:
        merged = merge(merged, part, capacity=options.sketch_capacity, exact_rows=options.exact_rows)
    merged.extra["sha256"] = open_source(current).sha256()  # of the whole snapshot, as one pass records it
    return decide(load_profile(profile), merged, options=options, from_profile=True, current=current)


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
