"""The nightly estimate: tonight's serving snapshot against the champion's own estimate profile, no labels needed.

The champion (`alias` version) carries what promote recorded from the release gate's estimate verdict: the
profile's URI and SHA-256 (`conv.ESTIMATE_PROFILE_*_TAG`). The night downloads the version's ONNX file (found by
its gated digest) and the profile (checked against its digest), estimates, and tags the version with the night
(`NIGHTLY_TAG`, status first, so a registry search finds the failing champions) and with the last
`history_nights` nights (`HISTORY_TAG`, one entry per snapshot). When labels for a past snapshot arrive, running
that snapshot again with them adds the realised metric to its entry: the estimator's track record, drawn with the
estimates in `estimate_nights.png`. With a Pushgateway URL the figures go to Prometheus (`alerting.py`).

What the night records is evaluated by `night_in_run`, given the step run and the registry; `run_nightly` reads
and tags MLflow's through its step run, the unit tests hand fakes to `night_in_run`.
"""

from __future__ import annotations

import dataclasses
import json
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
from skewgate.common.publishing import publish, pyplot
from skewgate.common.recording import StepResult, TrackingOptions, evaluate_and_record
from skewgate.common.registry import Champion, ChampionReader, download_tagged
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.verdict import Verdict
from skewgate.estimate.core import EstimateOptions
from skewgate.estimate.run import estimate_in_run

if TYPE_CHECKING:
    from skewgate.common.mlflow_log import StepRun

log = logging.getLogger(__name__)
NIGHTLY_STEP = "nightly-estimate"
NIGHTLY_TAG, HISTORY_TAG = conv.ESTIMATE_NIGHTLY_TAG, conv.ESTIMATE_HISTORY_TAG
TAG_LIMIT = 5000  # characters MLflow keeps of a model version tag's value
HISTORY_PLOT = "estimate_nights.png"


class NightlyRegistry(ChampionReader, Protocol):
    """What the night needs of the registry: read (and download) the champion, tag it with the night."""

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None: ...


@dataclass(frozen=True, kw_only=True)
class NightlyEstimateOptions:
    """Every default of `run_nightly` and `nightly_estimate_op`: the registered model, the snapshot and the date
    are their arguments. The estimate's resamples and seed are the profile's."""

    alias: str = DEFAULT_ALIAS  # the version whose estimate profile calibrates tonight, tagged with the night
    estimate: EstimateOptions = field(default_factory=EstimateOptions)  # metric, max_drop, features, …
    history_nights: int = 30  # nights kept in the version's history tag (bounded by `TAG_LIMIT` too)
    pushgateway_url: str = ""  # push the night's figures here, labelled with the model's name (empty: no push)


def run_nightly(*, model_name: str, current: str | Path, options: NightlyEstimateOptions,
                tracking: TrackingOptions, run_date: str = "", labels: str | Path | None = None,
                plot: str | Path | None = None, history_plot: str | Path | None = None,
                partials: Sequence[str | Path] = ()) -> StepResult:
    """Tonight's estimate for the `options.alias` version of `model_name` (`night_in_run`) inside the step's
    MLflow run, whose registry it reads and tags (tracking is required: without it, an `error` verdict);
    `partials`: the fan-out's shard tallies (`tally_shard`) instead of reading `current`. Never raises: `error`
    verdict."""

    def evaluate(step_run: StepRun | None) -> Verdict:
        from skewgate.common.mlflow_log import MlflowRegistry

        if step_run is None:
            raise InputError("tracking_uri", expected="an MLflow tracking URI (the profile lives in the registry)",
                             found="none")
        return night_in_run(step_run, MlflowRegistry(step_run), model_name=model_name, current=current,
                            options=options, run_date=run_date, labels=labels, plot=plot, history_plot=history_plot,
                            partials=partials)

    return evaluate_and_record(NIGHTLY_STEP, evaluate, tracking, settings=options.estimate,
                               inputs={"current": current, "labels": labels})


def plan_nightly(*, model_name: str, options: NightlyEstimateOptions, tracking: TrackingOptions,
                 model_out: str | Path, profile_out: str | Path, registry: ChampionReader | None = None) -> None:
    """The fan-out's first task: copy the `options.alias` version's ONNX file and estimate profile (each checked
    against the digest it was promoted with) to `model_out` and `profile_out`, once for every shard. A read: no
    step run. The merge fetches them again and refuses shards tallied under another model or profile (a
    promotion between the two)."""
    if registry is None:
        from skewgate.common.mlflow_log import RegistryChampions, connect

        registry = RegistryChampions.of(connect(tracking.uri, experiment=tracking.experiment,
                                                deadline_s=tracking.deadline_s))
    with tempfile.TemporaryDirectory() as tmp:
        _, onnx, profile = champion_files(registry, model_name=model_name, alias=options.alias, directory=Path(tmp))
        shutil.copyfile(onnx, model_out)
        shutil.copyfile(profile, profile_out)


def champion_files(registry: ChampionReader, *, model_name: str, alias: str,
                   directory: Path) -> tuple[Champion, Path, Path]:
    """(the `alias` version, its ONNX file found by its gated digest, its estimate profile checked against its
    digest), downloaded into `directory`."""
    found = registry.fetch(model_name, alias, directory)
    if found is None:
        raise InputError(model_name, field=f"@{alias}", expected="a model version with this alias", found="none")
    if conv.ESTIMATE_PROFILE_URI_TAG not in found.tags:
        raise InputError(found.label, field=conv.ESTIMATE_PROFILE_URI_TAG, expected="an estimate profile "
                         "recorded at promotion (the gate's `skewgate estimate --profile-out`, tracked)",
                         found="no such tag")
    onnx, _ = conv.find_by_digest(found.files(), found.tags, found.uri)
    profile = download_tagged(registry, found, uri_tag=conv.ESTIMATE_PROFILE_URI_TAG,
                              sha_tag=conv.ESTIMATE_PROFILE_SHA_TAG, directory=directory)
    return found, Path(onnx), profile


def night_in_run(step_run: StepRun | None, registry: NightlyRegistry, *, model_name: str, current: str | Path,
                 options: NightlyEstimateOptions, run_date: str = "", labels: str | Path | None = None,
                 plot: str | Path | None = None, history_plot: str | Path | None = None,
                 partials: Sequence[str | Path] = ()) -> Verdict:
    """The night's estimate of `current` from the `alias` version's profile (or of the shards' `partials` of it);
    tags that version with the night and the history; `labels` (of this snapshot, arrived later) add the
    realised metric to the snapshot's entry."""
    # KFP resolves the schedule-time placeholder only for scheduled runs; otherwise the literal arrives.
    date = run_date if run_date and not run_date.startswith("{{") else datetime.now(UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as tmp:
        found, onnx, profile = champion_files(registry, model_name=model_name, alias=options.alias,
                                              directory=Path(tmp))
        verdict = estimate_in_run(step_run, onnx=onnx, current=current, profile=profile, current_labels=labels,
                                  options=options.estimate, plot=plot, partials=partials)
    nights = history_with(history_of(found.tags), verdict, date=date, keep=options.history_nights)
    registry.set_tags(model_name, found.version, {
        NIGHTLY_TAG: nightly_tag(verdict, date, step_run.run_id if step_run is not None else ""),
        HISTORY_TAG: history_tag(nights)})
    publish(step_run, tables={"estimate_nights.json": nights},
            outputs=[(history_plot, HISTORY_PLOT, lambda path: nights_plot(nights, model_name, path))])
    # the night this snapshot was first estimated: labels that arrive later chart at that night, beside its estimate
    snapshot = _snapshot(verdict)
    night = next((str(n["date"]) for n in nights if n.get("snapshot") == snapshot), date)
    details: dict[str, Any] = {**verdict.details, "model_version": found.version, "run_date": night,
                               "nights": nights}
    if options.pushgateway_url:
        details["pushgateway"] = push(verdict, gateway=options.pushgateway_url, model=model_name)
    return dataclasses.replace(verdict, step=NIGHTLY_STEP, details=details)


def nightly_tag(verdict: Verdict, date: str, run_id: str = "") -> str:
    estimated, interval = verdict.details.get("estimated_accuracy"), verdict.details.get("estimated_interval")
    figure = f" accuracy {estimated:.4f} [{interval[0]:.4f}, {interval[1]:.4f}]" if estimated is not None \
        and interval else ""
    return f"{verdict.status} {date}{figure}" + (f" run {run_id}" if run_id else "")


def history_of(tags: Mapping[str, str]) -> list[dict[str, Any]]:
    """The nights a version's history tag holds; a tag that is not a list of nights starts a new history (it is
    a record for people, nothing is judged on it), logged."""
    text = tags.get(HISTORY_TAG)
    if not text:
        return []
    try:
        nights = json.loads(text)
    except ValueError:
        nights = None
    if not isinstance(nights, list) or not all(isinstance(n, dict) and "snapshot" in n for n in nights):
        log.warning("%s is not a list of nights: starting a new history", HISTORY_TAG)
        return []
    return nights


def history_with(nights: list[dict[str, Any]], verdict: Verdict, *, date: str, keep: int) -> list[dict[str, Any]]:
    """`nights` with tonight's entry (keyed by the snapshot's SHA-256: a snapshot run again, with its labels,
    replaces its entry and keeps its first date), the last `keep`, fitting `TAG_LIMIT`."""
    row = verdict.details["table"][0]  # accuracy
    snapshot = _snapshot(verdict)
    entry: dict[str, Any] = {"date": date, "snapshot": snapshot, "status": verdict.status,
                             "reference": round(row["reference"], 4)}
    if "estimated" in row:
        entry.update(estimated=round(row["estimated"], 4), low=round(row["low"], 4), high=round(row["high"], 4))
    if "realised" in row:
        entry["realised"] = round(row["realised"], 4)
    earlier = next((n for n in nights if n.get("snapshot") == snapshot), None)
    if earlier is not None:
        entry["date"] = earlier.get("date", date)
        if "realised" not in entry and "realised" in earlier:
            entry["realised"] = earlier["realised"]
    kept = sorted([n for n in nights if n is not earlier] + [entry], key=lambda n: str(n.get("date")))[-keep:]
    while len(history_tag(kept)) > TAG_LIMIT:
        kept = kept[1:]
    return kept


def _snapshot(verdict: Verdict) -> str:
    return verdict.subject.data["current"][:16] if verdict.subject else ""


def history_tag(nights: list[dict[str, Any]]) -> str:
    return json.dumps(nights, separators=(",", ":"))


def push(verdict: Verdict, *, gateway: str, model: str) -> str:
    """Push to the gateway; an unreachable gateway is logged and recorded, not a reason to lose the verdict."""
    from skewgate.estimate.nightly.alerting import push_estimate_metrics

    try:
        push_estimate_metrics(verdict, gateway=gateway, model=model)
    except BackendError as err:
        log.error("%s", err)
        return f"not pushed: {err}"
    return f"pushed to {gateway}"


def nights_plot(nights: list[dict[str, Any]], model_name: str, path: Path) -> None:
    """The estimated accuracy over the nights with its interval, the reference's line, and the realised accuracy
    where labels arrived."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 3.8))
    try:
        dates = [str(n["date"])[:10] for n in nights]
        xs = list(range(len(nights)))
        estimated = [(x, n) for x, n in zip(xs, nights, strict=True) if "estimated" in n]
        if estimated:  # error bars, not a band: one night, or nights with gaps, still show their interval
            xe = [x for x, _ in estimated]
            ye = [n["estimated"] for _, n in estimated]
            axis.errorbar(xe, ye, yerr=[[y - n["low"] for y, (_, n) in zip(ye, estimated, strict=True)],
                                        [n["high"] - y for y, (_, n) in zip(ye, estimated, strict=True)]],
                          marker="o", color="#1f77b4", capsize=3, label="estimated accuracy (interval)")
        axis.plot(xs, [n["reference"] for n in nights], color="#888888", linestyle="--", marker="_", markersize=18,
                  label="reference accuracy")
        realised = [(x, n["realised"]) for x, n in zip(xs, nights, strict=True) if "realised" in n]
        if realised:
            axis.scatter(*zip(*realised, strict=True), color="#d62728", marker="x", zorder=3,
                         label="realised (labels arrived)")
        axis.set_xticks(xs, dates, rotation=45, ha="right", fontsize=7)
        axis.set_xlabel("night")
        axis.set_ylabel("accuracy")
        axis.set_title(f"{model_name}: estimated accuracy over the last {len(nights)} nights", fontsize=9)
        axis.legend(fontsize=7, loc="lower left")
        figure.tight_layout()
        figure.savefig(path, dpi=110, format="png")  # a KFP output path has no suffix to say so
    finally:
        plt.close(figure)
