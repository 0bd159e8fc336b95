"""What the drift components do around the core: write the pictures and the profile, log them to the step's
MLflow run, and (nightly) fetch the champion's profile from the registry and tag the champion with the result.

Kept out of `component.py` so that the component bodies stay short and this stays testable without KFP.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from skewgate.common import publishing as shared
from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.mlflow_log import MlflowRegistry, StepRun
from skewgate.common.verdict import Verdict
from skewgate.drift.core import DriftOptions, DriftResult, decide, drift_gate, summarise_current
from skewgate.drift.stats.profile import load_profile, save_profile
from skewgate.drift.outputs.report import heatmap_png, report_html
from skewgate.drift.stats.source import open_source
from skewgate.drift.stats.stream import empty_side, load_partial, merge, save_partial

log = logging.getLogger(__name__)
PROFILE_URI_TAG = "skewgate.drift.profile_uri"
PROFILE_SHA_TAG = "skewgate.drift.profile_sha256"


def publish(result: DriftResult, run: StepRun | None, *, heatmap: str | Path | None, html: str | Path | None,
            heatmap_name: str = "coverage_heatmap.png", html_name: str = "drift_report.html") -> None:
    """Write the heatmap and HTML report where asked; with tracking, log them (under the given names) and the
    per-feature table to the step run. Shared by the CLI and the components."""
    shared.publish(run, tables={"features.json": result.features}, outputs=[
        (heatmap, heatmap_name, lambda path: heatmap_png(result, path)),
        (html, html_name, shared.write_text(lambda: report_html(result)))])


def run_drift(run: StepRun | None, *, reference: str, current: str, model: str, options: DriftOptions,
              heatmap: str, html: str, profile_out: str) -> Verdict:
    """Release-gate drift; the reference profile goes to `profile_out` and, with tracking, to the step run,
    whose URI the verdict asks promote to tag on the model version (`registry_tags`)."""
    result = drift_gate(reference=reference, current=current, options=options, model=Path(model))
    publish(result, run, heatmap=heatmap, html=html)
    save_profile(result.profile.sketched(options.sketch), profile_out)
    if run is None:
        return result.verdict
    uri = run.log_artifact_as(profile_out, "reference.profile", "profile") + "/reference.profile"
    tags = {PROFILE_URI_TAG: uri, PROFILE_SHA_TAG: sha256_file(profile_out)}
    return dataclasses.replace(result.verdict, registry_tags=tags)


def _champion(run: StepRun | None, model_name: str, alias: str) -> tuple[MlflowRegistry, str, dict[str, str]]:
    if run is None:
        raise InputError("tracking_uri", expected="an MLflow tracking URI (the profile lives in the registry)",
                         found="none")
    registry = MlflowRegistry(run)
    version = registry.get_alias(model_name, alias)
    if version is None:
        raise InputError(model_name, field=f"@{alias}", expected="a model version with this alias", found="none")
    tags = registry.get_tags(model_name, version)
    if PROFILE_URI_TAG not in tags:
        raise InputError(f"{model_name} v{version}", field=PROFILE_URI_TAG,
                         expected="a drift profile recorded at promotion", found="no such tag")
    return registry, version, tags


def fetch_profile(run: StepRun | None, *, model_name: str, alias: str, directory: Path) -> tuple[str, Path]:
    """(version, path): the `alias` version's drift profile, checked against the SHA-256 tagged with it."""
    registry, version, tags = _champion(run, model_name, alias)
    profile = registry.download(tags[PROFILE_URI_TAG], directory)
    if sha256_file(profile) != tags.get(PROFILE_SHA_TAG):
        raise InputError(profile, field=PROFILE_SHA_TAG, expected=tags.get(PROFILE_SHA_TAG, "(none)"),
                         found=sha256_file(profile))
    return version, profile


def run_nightly(run: StepRun | None, *, model_name: str, alias: str, current: str, run_date: str, heatmap: str,
                html: str, pushgateway: str = "", partials: Sequence[str] = (), profile: str = "") -> Verdict:
    """Drift of `current` against the `alias` version's profile; tags that version with the status and date;
    with a `pushgateway` URL, pushes the figures there for Prometheus (`alerting.py`). Fanned out: the
    `partials` of the shards (`partial_statistics`) against the `profile` they were computed with, merged."""
    registry, version, tags = _champion(run, model_name, alias)
    assert run is not None
    with tempfile.TemporaryDirectory() as tmp:
        if partials:
            if sha256_file(profile) != tags.get(PROFILE_SHA_TAG):  # the champion changed since the plan step
                raise InputError(profile, field=PROFILE_SHA_TAG, expected=tags.get(PROFILE_SHA_TAG, "(none)"),
                                 found=sha256_file(profile))
            result = merge_partials(profile, partials, current=current)
        else:
            _, path = fetch_profile(run, model_name=model_name, alias=alias, directory=Path(tmp))
            result = drift_gate(reference=path, current=current)
    # KFP resolves the schedule-time placeholder only for scheduled runs; otherwise the literal arrives.
    date = run_date if run_date and not run_date.startswith("{{") else datetime.now(UTC).isoformat(timespec="seconds")
    publish(result, run, heatmap=heatmap, html=html)
    registry.set_tags(model_name, version, {"skewgate.drift.nightly.status": result.verdict.status,
                                            "skewgate.drift.nightly.date": date,
                                            "skewgate.drift.nightly.run_id": run.run_id})
    details = {**result.verdict.details, "model_version": version, "run_date": date,
               "shards": len(partials) or 1}
    if pushgateway:
        details["pushgateway"] = push(result, gateway=pushgateway, model=model_name)
    return dataclasses.replace(result.verdict, details=details)


def plan_shards(snapshot: str, *, shards: int) -> tuple[list[int], int]:
    """(shard indices, rows): files are dealt round-robin to at most `shards` shards, none empty."""
    source = open_source(snapshot)
    return list(range(max(1, min(shards, len(source.files))))), source.count_rows()


def partial_statistics(profile: str, snapshot: str, *, shard: int, shards: int, rows: int, out: str) -> Path:
    """One shard's statistics against the profile: files `shard`, `shard + shards`, … of the snapshot."""
    files = open_source(snapshot).files[shard::shards]
    reference = load_profile(profile)
    stats = summarise_current(reference, snapshot, files=files, rows=rows) if files else empty_side(
        reference.numeric_names, tuple(reference.categories), reference.features.size)
    return save_partial(stats, out)


def merge_partials(profile: str, partials: Sequence[str], *, current: str,
                   options: DriftOptions | None = None) -> DriftResult:
    """The verdict from the shards' statistics: what one pass over the whole snapshot decides."""
    options = options or DriftOptions()
    loaded = [load_partial(p) for p in partials]
    merged = loaded[0]
    for part in loaded[1:]:
        merged = merge(merged, part, capacity=options.sketch_capacity, exact_rows=options.exact_rows)
    merged.extra["sha256"] = open_source(current).sha256()  # of the whole snapshot, as one pass records it
    return decide(load_profile(profile), merged, options=options, from_profile=True, current=current)


def push(result: DriftResult, *, gateway: str, model: str) -> str:
    """Push to the gateway; an unreachable gateway is logged and recorded, not a reason to lose the verdict
    (the run still fails on drift, and the alert on a stale `last_run` timestamp fires)."""
    from skewgate.common.errors import BackendError
    from skewgate.drift.outputs.alerting import push_drift_metrics

    try:
        push_drift_metrics(result.verdict, result.features, gateway=gateway, model=model)
    except BackendError as err:
        log.error("%s", err)
        return f"not pushed: {err}"
    return f"pushed to {gateway}"
