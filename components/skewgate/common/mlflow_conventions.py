"""What skewgate writes into MLflow, by name and shape, without MLflow: tag names, metric keys, the nightly drift
series, table columns, promotion-log record files, and finding a registered version's ONNX file by its digest.

Pure (no mlflow import), so the conventions are tested without a store; `mlflow_log` does the writing.
"""

from __future__ import annotations

import contextlib
import enum
import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePath
from types import SimpleNamespace
from typing import Any

from skewgate.common.errors import InputError
from skewgate.common.markdown import cell, escape
from skewgate.common.step_details import NightRecord
from skewgate.common.verdict import Verdict

PIPELINE_RUN_TAG = "skewgate.pipeline_run_id"
PROMOTION_LOG_TAG = "skewgate.kind"
PROMOTION_LOG_DIR = "promotions"
VERDICT_DIGEST_TAG = "skewgate.verdict_sha256"
ONNX_DIGEST_TAG = "skewgate.onnx_sha256"
# KFP run ids are UUIDs; kfp.local's are names with a timestamp. Nothing else may reach a filter string.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
OUTCOME_TAG = "skewgate.outcome"
# MLflow 3.x marks what an experiment is for with this tag ("custom_model_development": traditional ML, runs
# table; "genai_development": traces), which its UI's experiment-kind selector reads and writes (mlflow/server/js;
# mlflow/assistant/skills/mlflow-onboarding/SKILL.md). The 3.17 UI chooses the landing page from its own
# workflow switch instead (header "GenAI | Model training", `?workflowType=` in the URL, default GenAI), so the
# links skewgate prints carry `workflowType=machine_learning` as well (`runs_table_link`; checked in Chromium by
# tests/integration/test_mlflow_ui_in_browser.py).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
DRIFT_HISTORY_TAG = "drift-history"  # value of `skewgate.kind` on the run that charts nightly drift over nights
PROMOTION_LOG_KIND = "promotion-log"  # value of `skewgate.kind` on the experiment's promotion-log run
# The runs table's filter the printed links apply (`runs_table_link`): the pipelines' and the steps' runs, all
# tagged with their pipeline run (empty for a CLI step), and not the bookkeeping runs (promotion-log, drift-history)
# that carry none. Clear the search box to see those.
CANDIDATE_RUNS_FILTER = "tags.`skewgate.pipeline_run_id` LIKE '%'"
MLFLOW_BATCH_LIMIT = 1000  # metrics per log_batch call
# MLflow's limits (mlflow/utils/validation.py): params per log_batch call, a param's key and value, and a
# dataset's name and digest (the digest column holds 36 characters: the full SHA-256 goes into an input tag).
PARAMS_BATCH_LIMIT = 100
PARAM_KEY_LIMIT = 250
PARAM_VALUE_LIMIT = 6000
MAX_PARAMS = 500  # a step's settings beyond this many are not logged (a run's params table stays readable)
DATASET_NAME_LIMIT = 500
DATASET_DIGEST_LENGTH = 12  # shown beside the dataset's name in the runs table; the full SHA-256 is a tag
DATASET_CONTEXT_TAG = "mlflow.data.context"  # the input tag MLflow's UI shows as the dataset's role
DATASET_SHA256_TAG = "skewgate.sha256"
# Settings that are where a step records, not how it judges: never logged as params. Keys that may hold a secret
# are never logged either, and a URL's user:password@ is cut from any value.
TRACKING_SETTINGS = frozenset({"tracking_uri", "experiment", "pipeline_run_id", "mlflow_deadline", "deadline_s",
                               "signing_key", "quiet", "verbose", "report"})
_SECRET_KEY = re.compile(r"password|passwd|secret|token|credential|api_?key|private", re.IGNORECASE)
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
RUN_NAME_TAG = "mlflow.runName"
RUN_NAME_LIMIT = 250
# Every tag name skewgate writes or reads is here. A registered version carries a handful (DESIGN.md, "MLflow
# conventions"): the digest of its ONNX file; per alias it was promoted (or refused) under, where its attestations
# are and the promotion's outcome and reason (promote writes those); and the few tags a later step reads back from
# the version — the drift profile the nightly run compares serving data with, the estimate profile it estimates
# accuracy with. Every step's evidence is the
# description's table and the attestation folder, not a tag each.
ATTESTATION_URI_TAG = "skewgate.attestation.uri"  # one per version, as written before decisions were per alias


def attestation_uri_tag(alias: str) -> str:
    """Where the attestations of the version's promotion to `alias` are (promote's signed decision among them): one
    tag per alias, so that promoting the same file under another alias, or being refused there, never changes what
    `verify --alias ALIAS` reads."""
    return f"skewgate.attestation.{alias}.uri"


def promotion_tags(alias: str) -> tuple[str, str]:
    """The outcome of the version's last promotion to `alias` (`promoted` or `refused`) and why."""
    return f"skewgate.promotion.{alias}.status", f"skewgate.promotion.{alias}.reason"

PROFILE_URI_TAG = "skewgate.drift.profile_uri"  # where the champion's reference profile is (drift writes it)
PROFILE_SHA_TAG = "skewgate.drift.profile_sha256"
# where the champion's estimate profile is (its calibration: a night estimates its accuracy without labels)
ESTIMATE_PROFILE_URI_TAG = "skewgate.estimate.profile_uri"
ESTIMATE_PROFILE_SHA_TAG = "skewgate.estimate.profile_sha256"
READ_BACK_TAGS = frozenset({PROFILE_URI_TAG, PROFILE_SHA_TAG, ESTIMATE_PROFILE_URI_TAG, ESTIMATE_PROFILE_SHA_TAG})
# The last night, in one tag: "<status> <date>[ run <step run id>]"; the status leads, so
# `tags.\`skewgate.drift.nightly\` LIKE 'fail%'` finds the drifted champions.
NIGHTLY_TAG = "skewgate.drift.nightly"
# The nightly estimate's last night ("<status> <date> accuracy <est> [<low>, <high>][ run <id>]") and its last
# nights (JSON, one entry per snapshot, the realised accuracy where labels arrived): estimate/nightly/night.py
ESTIMATE_NIGHTLY_TAG = "skewgate.estimate.nightly"
ESTIMATE_HISTORY_TAG = "skewgate.estimate.history"
SERIES_TAG_PREFIX = "skewgate.drift.series."  # the anytime-valid series' state between nights (drift/stats/series.py)
# A companion version registered beside the FP32 one (`<model>-int8`, `<model>-step`) names the version it belongs to
INT8_SUFFIX = "-int8"
STEP_SUFFIX = "-step"  # a stateful model's STEP model, the file served step by step
FP32_MODEL_TAG, FP32_VERSION_TAG, FP32_SHA_TAG = "skewgate.fp32.model", "skewgate.fp32.version", "skewgate.fp32.sha256"
# What a step's verdict asks to be tagged under its own `skewgate.<step>.` prefix and another step reads
CALIBRATE_INT8_SHA_TAG = "skewgate.calibrate.int8_sha256"  # the INT8 file calibrate wrote (promote checks it)
COMPARE_CHAMPION_VERSION_TAG = "skewgate.compare.champion_version"
COMPARE_CHAMPION_SHA_TAG = "skewgate.compare.champion_sha256"
# A promote run announces what it is moving (promote's contention: common/mlflow_log.py)
PROMOTE_TARGET_TAG = "skewgate.promote.target"  # `name@alias`
PROMOTE_VERSION_TAG = "skewgate.promote.version"  # the version it moves the alias to, once known
PROCESS_TAG = "skewgate.process"  # `host:pid:start` of the process running a step run
ENDED_AS_STALE_TAG = "skewgate.ended_as_stale"  # why a run left RUNNING by a process that is gone was ended
# A pipeline run's MLflow parent run and its step runs
STEP_TAG = "skewgate.step"  # on a step run: which step
ROLE_TAG = "skewgate.role"  # `pipeline` on the parent run
PIPELINE_TAG = "skewgate.pipeline"  # on the parent run: release-gate, nightly-drift, …
REASON_TAG = "skewgate.reason"  # on the parent run: why the outcome is what it is
CANDIDATE_SHA_TAG = "skewgate.candidate_sha256"
MODEL_VERSION_TAG = "skewgate.model_version"  # the registry version the run promoted or refused
# calibrate's verdict asks for these on the promoted version's run (its `skewgate.calibrate.` prefix)
CALIBRATE_EXCLUDED_TAG = "skewgate.calibrate.excluded_nodes"
CALIBRATE_DROP_TAG = "skewgate.calibrate.accuracy_drop"
CALIBRATE_MAC_SHARE_TAG = "skewgate.calibrate.int8_mac_share"
# the digest; for one alias, its attestations and outcome; the drift and the estimate profiles
MAX_VERSION_TAGS = 1 + 1 + len(promotion_tags("champion")) + len(READ_BACK_TAGS)
DESCRIPTION_LIMIT = 60000  # characters MLflow keeps of a description (its column is TEXT; the UI shows it all)
UI_WORKFLOW = "workflowType=machine_learning"  # the MLflow 3 UI's "Model training" view (see EXPERIMENT_KIND_TAG)


def metric_key(name: str) -> str:
    # MLflow keys allow alphanumerics, _ - . space / ; anything else (for example ':') becomes '_'.
    return "".join(ch if ch.isalnum() or ch in "_-. /" else "_" for ch in name)


def check_metrics(verdict: Verdict) -> dict[str, float]:
    """`<check>.passed` → 1 when the check passed, 0 when not, for every check (one direction for every judgement:
    a runs table can be sorted on it), and `<check>` → its figure where it has one (in its own units: a count of
    drifted features, an error ratio, a p-value; `checks.json` says against which limit)."""
    metrics = {}
    for check in verdict.checks:
        if check.value is not None:
            metrics[check.name] = check.value
        metrics[f"{check.name}.passed"] = float(check.passed)
    return metrics


def step_metrics(step: str, verdict: Verdict) -> dict[str, float]:
    """`check_metrics` as a step run's: keyed `<step>.<check>[.passed]`, MLflow-safe."""
    return {metric_key(f"{step}.{name}"): value for name, value in check_metrics(verdict).items()}


def step_tags(verdict: Verdict) -> dict[str, str]:
    """The status tags of a step run, with the verdict's digest (promote matches a pipeline's verdicts to it),
    and its description (`mlflow.note.content`, what the run page shows first): the outcome, and every failed
    check with its figure and detail, so a red run says why without opening `checks.json`."""
    tags = {"skewgate.status": verdict.status, "skewgate.message": verdict.message[:4000],
            VERDICT_DIGEST_TAG: verdict.digest(), NOTE_TAG: run_description(verdict)}
    if verdict.subject is not None:
        tags["skewgate.subject_sha256"] = verdict.subject.sha256
    return tags


NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI (Markdown)


def run_description(verdict: Verdict) -> str:
    """The run page's description: `**FAIL** — <message>`, then a table of the checks that failed (or warned):
    figure against its limit, and the detail, whole. What a model or data set named (checks' details, modules,
    features) is escaped (`common.markdown`): text, never markup, in the MLflow UI."""
    lines = [f"**{verdict.status.upper()}** — {escape(_cut(verdict.message, 300))}"]
    failed = verdict.failed_checks
    if failed:
        lines += ["", "| check | figure | detail |", "| --- | --- | --- |"]
        for check in failed:
            figure = (f"{check.value:.4g} ({_bound(check)} {check.limit:.4g})"
                      if check.value is not None and check.limit is not None else "")
            lines.append(f"| {cell(check.name)} | {figure} | {cell(check.detail)} |")
    return "\n".join(lines)[:5000]


def _bound(check: Any) -> str:
    """Which side of its limit a check must stay on, as its judgement shows: `at least` where a value above the
    limit passes (a p-value) or one below it fails, `at most` the other way round, `limit` where it cannot tell."""
    if check.value is None or check.limit is None or check.value == check.limit:
        return "limit"
    above = check.value > check.limit
    return "at least" if above == check.passed else "at most"


def run_status(status: str | None) -> str:
    """The MLflow status a step run ends with: FINISHED (green) for a `pass`/`warn` verdict (or none logged),
    FAILED (red) for `fail` and `error`, so that no red parent run shows a green step that did not pass."""
    return "FINISHED" if status in (None, "pass", "warn") else "FAILED"


def display_name(artifact: str) -> str:
    """How a run name shows a judged file: its file name (`/in/model.pt2` → `model.pt2`); a registry or run URI
    (`models:/digits/3`) as written."""
    text = artifact.strip().rstrip("/")
    if re.match(r"(models|runs):/", text):
        return text
    return PurePath(text).name or text


def parent_run_name(candidate: str, label: str, *, fallback: str) -> str:
    """`<candidate file> · <outcome>` (`model.pt2 · blocked`), or `<fallback> · <outcome>` when no step named the
    candidate (the pipeline failed before any verdict)."""
    return f"{display_name(candidate) if candidate else fallback} · {label}"[:RUN_NAME_LIMIT]


def check_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """The rows of a step run's `checks.json` table: per check its `result` (pass; fail, or warn for a failed
    check whose severity is `warn`) and the severity only on the rows that failed (a passing check has none)."""
    rows = []
    for check in verdict.checks:
        result = "pass" if check.passed else check.severity
        rows.append({"name": check.name, "result": result, "value": check.value, "limit": check.limit,
                     "severity": "" if check.passed else check.severity, "detail": check.detail})
    return rows


def params(settings: Any) -> dict[str, str]:
    """A step's settings as MLflow params: a dataclass's fields (nested ones and mappings flattened to
    `a.b`), a namespace's attributes or a mapping's items; values as text (JSON for numbers, booleans, null and
    lists; strings and paths as they are), keys and values cut to MLflow's limits. Tracking settings
    (`TRACKING_SETTINGS`) and keys that may hold a secret are left out; at most `MAX_PARAMS`."""
    out: dict[str, str] = {}

    def put(key: str, value: Any) -> None:
        leaf = key.rsplit(".", 1)[-1]
        if not key or leaf in TRACKING_SETTINGS or _SECRET_KEY.search(key) or len(out) >= MAX_PARAMS:
            return
        if isinstance(value, str | PurePath):
            text = str(value)
        elif isinstance(value, enum.Enum):
            text = str(value.value)
        else:
            text = json.dumps(value, default=str, sort_keys=True)
        text = _URL_USERINFO.sub("***@", text)
        if len(text) > PARAM_VALUE_LIMIT:
            text = text[:PARAM_VALUE_LIMIT - 1] + "…"
        out[metric_key(key)[:PARAM_KEY_LIMIT]] = text

    def walk(prefix: str, value: Any, depth: int) -> None:
        items: Any = None
        if is_dataclass(value) and not isinstance(value, type):
            items = ((f.name, getattr(value, f.name)) for f in fields(value))
        elif isinstance(value, Mapping):
            items = value.items()
        elif isinstance(value, SimpleNamespace) or type(value).__name__ == "Namespace":
            items = vars(value).items()
        if items is None or depth > 4:
            put(prefix, value)
            return
        for name, item in items:
            walk(f"{prefix}.{name}" if prefix else str(name), item, depth + 1)

    walk("", settings, 0)
    return out


@dataclass(frozen=True)
class DatasetRef:
    """One input of a step as an MLflow dataset: its name, where it was read (`source`, a path or URI), its
    SHA-256 and its role in the step (`context`: candidate, source, or the verdict's name for it)."""

    name: str
    source: str
    sha256: str
    context: str

    @property
    def digest(self) -> str:
        return self.sha256[:DATASET_DIGEST_LENGTH]


def verdict_datasets(verdict: Verdict, paths: Mapping[str, str] | None = None) -> list[DatasetRef]:
    """What a verdict says its step read, as datasets: the judged artifact (`candidate`), the model it was made
    from (`source`, when the verdict names its digest), and each input data set (`subject.data`: name → SHA-256),
    located by `paths` (the step's input of that name, when known) or else named only."""
    subject = verdict.subject
    if subject is None:
        return []
    refs = [DatasetRef(display_name(subject.artifact), subject.artifact, subject.sha256, "candidate")]
    if subject.source and subject.source_sha256:
        refs.append(DatasetRef(display_name(subject.source), subject.source, subject.source_sha256, "source"))
    for role, sha in subject.data.items():
        if not sha:
            continue
        where = (paths or {}).get(role, "")
        refs.append(DatasetRef(display_name(where) if where else role, where or role, sha, role))
    unique: dict[tuple[str, str], DatasetRef] = {}  # a file that is both the candidate and an input: once
    for r in refs:
        if SHA256_TEXT.fullmatch(r.sha256):
            name = r.name[:DATASET_NAME_LIMIT] or r.context
            unique.setdefault((name, r.sha256), DatasetRef(name, _URL_USERINFO.sub("***@", r.source), r.sha256,
                                                           r.context))
    return list(unique.values())


SHA256_TEXT = re.compile(r"[0-9a-f]{64}")


def table_columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Rows of one shape as MLflow table columns; values that are not scalars become JSON text."""
    plain = [{k: v if isinstance(v, str | int | float | bool) or v is None else json.dumps(v)
              for k, v in row.items()} for row in rows]
    keys = list(dict.fromkeys(k for row in plain for k in row))
    return {k: [row.get(k) for row in plain] for k in keys}


def drift_statistics(verdict: Verdict) -> dict[str, float]:
    """`drift.<check>` per check with a value, `drift.passed`, `drift.mmd2`, and per feature
    `drift.feature.<name>.statistic` / `.pvalue` (at most 200 features, as the verdict lists them)."""
    out = {f"drift.{c.name}": c.value for c in verdict.checks if c.value is not None}
    out["drift.passed"] = float(verdict.status in {"pass", "warn"})
    mmd = verdict.details.get("mmd")
    if isinstance(mmd, Mapping) and isinstance(mmd.get("value"), int | float):
        out["drift.mmd2"] = float(mmd["value"])
    for row in verdict.details.get("features", ())[:200]:
        if not isinstance(row, Mapping) or "feature" not in row:
            continue
        for stat in ("statistic", "pvalue"):
            value = row.get(stat)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                out[f"drift.feature.{row['feature']}.{stat}"] = float(value)
    return out


def estimate_statistics(verdict: Verdict) -> dict[str, float]:
    """A nightly estimate's figures as a night's series: `estimate.passed`, the reference's accuracy and, when the
    night could be estimated, `estimate.accuracy` with `.low` / `.high`, and `estimate.realised_accuracy` when
    the snapshot's labels arrived (the estimator's track record, charted beside the estimate)."""
    out = {"estimate.passed": float(verdict.status in {"pass", "warn"})}
    table = verdict.details.get("table") or ()
    row = table[0] if table and isinstance(table[0], Mapping) else {}
    for key, name in (("reference", "estimate.reference_accuracy"), ("estimated", "estimate.accuracy"),
                      ("low", "estimate.accuracy.low"), ("high", "estimate.accuracy.high"),
                      ("realised", "estimate.realised_accuracy")):
        value = row.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


def drift_night(verdict: Verdict) -> tuple[int, int]:
    """(timestamp in ms, night) of a nightly verdict: its run date, and the days since 1970-01-01 of that date
    (the series' step, so that every night is one point whenever it was logged)."""
    when = run_date(verdict)
    return int(when.timestamp() * 1000), int(when.timestamp() // 86400)


def run_date(verdict: Verdict) -> datetime:
    """A nightly verdict's run date (`NightRecord`), else when it was created, else now."""
    night = NightRecord.of(verdict)
    for text in (None if night is None else night.run_date, verdict.created_at):
        with contextlib.suppress(TypeError, ValueError):
            when = datetime.fromisoformat(str(text))
            return when if when.tzinfo else when.replace(tzinfo=UTC)
    return datetime.now(UTC)


def promotion_record(record: Mapping[str, Any]) -> tuple[str, bytes]:
    """(file name, bytes) of one promotion-log record: `<time>-<random>.json`, unique per attempt, so that
    concurrent promotions never write the same file."""
    file_name = f"{str(record['at']).replace(':', '')}-{uuid.uuid4().hex[:12]}.json"
    return file_name, (json.dumps(dict(record), sort_keys=True) + "\n").encode()


def run_link(experiment_id: str, run_id: str) -> str:
    """A run's page in the MLflow UI as a link relative to the UI's own address (a registry description is shown
    by the same UI): the hash route every MLflow UI since 1.x serves (`#/experiments/<id>/runs/<run id>`), with the
    query that makes MLflow 3's UI open it in its "Model training" view rather than its GenAI one; an older UI
    ignores the query. Nothing in it depends on the address the UI is served at."""
    return f"#/experiments/{experiment_id}/runs/{run_id}?{UI_WORKFLOW}"


def version_description(markdown: str, *, experiment_id: str, parent_run_id: str, promote_run_id: str = "") -> str:
    """A version's description: `markdown`, then links to the pipeline's parent run and to the promote run that
    holds the attestations, in the MLflow UI (`run_link`)."""
    links = [f"Pipeline run: [{parent_run_id[:8]}]({run_link(experiment_id, parent_run_id)})"]
    if promote_run_id and promote_run_id != parent_run_id:
        links.append(f"promote run (Artifacts: `attestations/`): "
                     f"[{promote_run_id[:8]}]({run_link(experiment_id, promote_run_id)})")
    return f"{markdown}\n\n{' · '.join(links)}"[:DESCRIPTION_LIMIT]


def model_description(name: str, alias: str) -> str:
    """The registered model's description, written once when it has none: what skewgate gates and how to read a
    version. Plain text in its first line (the models table shows it unrendered)."""
    name = name.replace("`", "'")
    return "\n".join([
        "Promoted by skewgate: a version gets the alias only when every required gate passed for its exact file "
        "(export, calibrate-int8, drift, parity, Triton probe, comparison with the champion; signed verdicts).",
        "",
        f"* Alias `{alias}`: the version serving code loads (`models:/<name>@{alias}`); run `skewgate verify "
        f"--model-name <name> --alias {alias} --trusted-key <key.pub>` before loading it.",
        f"* Tag `{promotion_tags(alias)[0]}`: `promoted` or `refused` (one per alias); `{promotion_tags(alias)[1]}` "
        "says why.",
        f"* Tag `{ONNX_DIGEST_TAG}`: SHA-256 of the version's `model.onnx`, the file the gates judged.",
        f"* Tag `{attestation_uri_tag(alias)}`: the signed verdicts and promote's signed decision for that alias "
        "(artifacts of the promote run).",
        "* Tags `skewgate.drift.*`: the reference profile the nightly drift check compares serving data with, "
        "and that check's latest result.",
        "* The version's description: one row per gate (status, key figure, short SHA-256 of its verdict file) "
        "and links to the pipeline run.",
    ]).replace("<name>", name)[:DESCRIPTION_LIMIT]


def key_figure(verdict: Verdict) -> str:
    """One line for a step in the version's evidence table: its first failed check (`name: value vs limit`, or
    its detail), else the check closest to its limit (ratio of value to limit nearest 1), else its message."""
    def figure(check: Any) -> str:
        if check.value is not None and check.limit is not None:  # `at least` for a p-value: not a violation
            return f"{check.name}: {check.value:.4g} ({_bound(check)} {check.limit:.4g})"
        return f"{check.name}: {check.detail}" if check.detail else check.name

    failed = verdict.failed_checks
    if failed:
        more = f" (+{len(failed) - 1} more failed)" if len(failed) > 1 else ""
        return _cut(figure(failed[0]), 120) + more
    bounded = [(c, c.value / c.limit) for c in verdict.checks if c.value is not None and c.limit is not None
               and c.value > 0 and c.limit > 0 and not c.value == c.limit == 1.0]  # 1 of 1: a yes/no check
    if bounded:
        closest, _ = min(bounded, key=lambda pair: abs(math.log(pair[1])))
        return _cut(f"{verdict.message}; closest to its limit: {figure(closest)}", 160)
    return _cut(verdict.message, 160)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def find_by_digest(local: Path, tags: Mapping[str, str], where: str) -> tuple[Path, str]:
    """The downloaded file whose SHA-256 equals the version's `skewgate.onnx_sha256` tag, and that digest.

    Found by digest, not by name: a bare `onnx/<file>` folder (a KFP output has no suffix) and an MLflow Model
    directory (`MLmodel` + `model.onnx`) both work. Files that do not match their evidence are an `InputError`
    naming `where`: nothing downloaded from the registry is trusted without it."""
    from skewgate.common.io import sha256_file

    expected = tags.get(ONNX_DIGEST_TAG)
    if not expected:
        raise InputError(where, field=ONNX_DIGEST_TAG, expected="the SHA-256 tag promote writes",
                         found="no such tag")
    candidates = sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else [local]
    digests = {path: sha256_file(path) for path in candidates}
    for path, digest in digests.items():
        if digest == expected:
            return path, digest
    listing = ", ".join(f"{p.relative_to(local) if p != local else p.name} sha256 {d}" for p, d in digests.items())
    raise InputError(where, field=ONNX_DIGEST_TAG, expected=f"a file with sha256 {expected}",
                     found=listing or "no file in the version's artifacts")
