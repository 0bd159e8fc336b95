"""The model registry, promote's side (`MlflowRegistry`: versions, tags, attestations, aliases, the promotion
log, and the contention between promotions of one alias: announced runs, stale RUNNING runs ended). What an alias
points at is read by `champions.RegistryChampions`, which `MlflowRegistry` extends."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skewgate.common import mlflow_conventions as conv
from skewgate.common.errors import BackendError, Inconsistent, InputError, Rejected
from skewgate.common.mlflow_log._client import _or_none
from skewgate.common.mlflow_log.champions import RegistryChampions, alias_version
from skewgate.common.mlflow_log.models import _pinned_requirements, onnx_external_data, onnx_signature
from skewgate.common.mlflow_log.tracking import StepRun, Tracking
from skewgate.common.steps import DEFAULT_ALIAS
from skewgate.common.strict_json import SHA256_HEX

log = logging.getLogger(__name__)


class MlflowRegistry(RegistryChampions):
    """The MLflow model registry behind the `Registry` protocol (common/registry.py), and a `ChampionReader`.

    A version is an MLflow Model (the `mlflow.onnx` flavour: signature from the ONNX graph, dynamic batch as -1,
    an input example when one is given, pinned requirements) whose `model.onnx` holds the gated bytes, so that
    `mlflow.pyfunc.load_model("models:/NAME@champion")` predicts what ONNX Runtime computes from the judged file.
    No user-supplied string is ever pasted into a filter: names are compared in Python, digests are hex.
    """

    def __init__(self, step_run: StepRun, *, input_example: Mapping[str, Any] | None = None) -> None:
        super().__init__(step_run.tracking.uri, step_run.tracking.client)
        self.run = step_run
        self.tracking = step_run.tracking
        self.input_example = dict(input_example) if input_example else None
        self._alias = ""

    def model_exists(self, name: str) -> bool:
        found = _or_none(self.tracking.uri, f"look up model {name!r}", lambda: self.client.get_registered_model(name),
                         missing=frozenset({"RESOURCE_DOES_NOT_EXIST"}))
        return found is not None

    def version_exists(self, name: str, version: str) -> bool:
        return _or_none(self.tracking.uri, f"look up {name!r} v{version}",
                        lambda: self.client.get_model_version(name, version)) is not None

    def find_version(self, name: str, sha256: str) -> str | None:
        """The lowest version of `name` registered for this digest (there is one unless a race is under way)."""
        if not SHA256_HEX.fullmatch(sha256):
            raise InputError("onnx", field="sha256", expected="64 lowercase hex digits", found=sha256)
        with self.tracking.mapped(f"find the version of sha256 {sha256}"):
            found = self.client.search_model_versions(f"tags.`{conv.ONNX_DIGEST_TAG}` = '{sha256}'",
                                                      max_results=10000)
        versions = sorted(int(v.version) for v in found if v.name == name)
        return str(versions[0]) if versions else None

    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str:
        """Register the ONNX as an MLflow Model version. Concurrent promotions of one file may each get this
        far: every one of them then keeps the lowest version and deletes its own duplicate, so exactly one
        version carries the digest."""
        try:
            with self.tracking.mapped(f"create registered model {name!r}"):
                self.client.create_registered_model(name)
        except Rejected as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":  # a concurrent promote may have created it
                raise
        source = self.log_onnx_model(artifact, sha256, artifact_path)
        with self.tracking.mapped(f"create a version of {name!r}"):
            created = self.client.create_model_version(name, source=source, run_id=self.run.run_id,
                                                       tags={conv.ONNX_DIGEST_TAG: sha256})
        mine = str(created.version)
        winner = self.find_version(name, sha256) or mine
        if winner != mine:
            log.info("%s: version %s already holds sha256 %s; dropping duplicate v%s", name, winner, sha256, mine)
            with self.tracking.mapped(f"delete duplicate {name!r} v{mine}"):
                self.client.delete_model_version(name, mine)
        return winner

    def log_onnx_model(self, artifact: Path, sha256: str, artifact_path: str = "model") -> str:
        """Save `artifact` as an MLflow Model into this run; returns its artifact URI."""
        import shutil

        import mlflow.onnx
        import onnx

        from skewgate.common.io import sha256_file

        model = onnx.load(str(artifact))
        with tempfile.TemporaryDirectory() as tmp:
            target = Path(tmp) / artifact_path
            mlflow.onnx.save_model(model, str(target), signature=onnx_signature(model),
                                   input_example=self.input_example, pip_requirements=_pinned_requirements())
            # save_model re-serialises the proto (tensors of 1 KiB or more into an external-data file beside
            # it); the registry must hold the judged bytes themselves, and no model file they do not load
            written = onnx_external_data(target / "model.onnx")
            shutil.copyfile(artifact, target / "model.onnx")
            for location in written - onnx_external_data(target / "model.onnx"):
                if (target / location).resolve().parent == target.resolve():
                    (target / location).unlink(missing_ok=True)
            if sha256_file(target / "model.onnx") != sha256:
                raise InputError(artifact, expected=f"the judged file (sha256 {sha256})",
                                 found="other bytes: it changed while it was being registered")
            return self.run.log_artifacts(target, artifact_path)

    def get_tags(self, name: str, version: str) -> dict[str, str]:
        with self.tracking.mapped(f"read the tags of {name!r} v{version}"):
            return dict(self.client.get_model_version(name, version).tags)

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        with self.tracking.mapped(f"tag {name!r} v{version}"):
            for key, value in tags.items():
                self.client.set_model_version_tag(name, version, key, value)

    def get_alias(self, name: str, alias: str) -> str | None:
        return alias_version(self.tracking, name, alias)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        with self.tracking.mapped(f"move alias {alias!r} of {name!r} to v{version}"):
            self.client.set_registered_model_alias(name, alias, version)

    def set_description(self, name: str, version: str, markdown: str) -> None:
        """The version's description, with links to the pipeline's parent run and to this promote run in the
        MLflow UI; and the registered model's (`conv.model_description`) when it has none — a description
        someone wrote is never replaced."""
        with self.tracking.mapped(f"describe {name!r} v{version}"):
            run = self.client.get_run(self.run.run_id)
            parent = run.data.tags.get("mlflow.parentRunId", self.run.run_id)
            self.client.update_model_version(name, version, description=conv.version_description(
                markdown, experiment_id=self.tracking.experiment_id, parent_run_id=parent,
                promote_run_id=self.run.run_id))
        with self.tracking.mapped(f"describe the registered model {name!r}"):
            if not (self.client.get_registered_model(name).description or "").strip():
                self.client.update_registered_model(name, description=conv.model_description(
                    name, self._alias or DEFAULT_ALIAS))

    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str:
        """The verdicts, their envelopes and promote's own, as artifacts of this promote run."""
        with tempfile.TemporaryDirectory() as tmp:
            for file_name, data in files.items():
                (Path(tmp) / file_name).write_bytes(data)
            return self.run.log_artifacts(tmp, f"attestations/v{version}")

    def logged_verdict_envelopes(self, pipeline_run_id: str) -> list[dict[str, Any]]:
        """Every verdict envelope (`<step>.verdict.intoto.jsonl`) logged by a run tagged with this pipeline run,
        unverified. Which run holds an envelope, and every tag, are unsigned and mean nothing: promote keeps only
        what a trusted key signed for this pipeline run. A file that is not a bounded DSSE envelope is skipped."""
        from skewgate.common import attest

        if not conv.RUN_ID_PATTERN.fullmatch(pipeline_run_id):
            raise InputError("--pipeline-run-id", expected=f"a run id matching {conv.RUN_ID_PATTERN.pattern}",
                             found=repr(pipeline_run_id))
        suffix = f".verdict{attest.ENVELOPE_SUFFIX}"
        envelopes: list[dict[str, Any]] = []
        query = f"tags.`{conv.PIPELINE_RUN_TAG}` = '{pipeline_run_id}'"
        with self.tracking.mapped(f"read the signed verdicts of pipeline run {pipeline_run_id}"), \
                tempfile.TemporaryDirectory() as tmp:
            runs, token = [], None
            for _ in range(10):  # 10,000 runs: far beyond any pipeline run's retries
                page = self.client.search_runs([self.tracking.experiment_id], query, max_results=1000,
                                               page_token=token)
                runs += list(page)
                token = page.token
                if not token:
                    break
            for index, run in enumerate(runs):
                for info in self.client.list_artifacts(run.info.run_id):
                    if info.is_dir or not info.path.endswith(suffix) or \
                            (info.file_size or 0) > attest.MAX_ENVELOPE_BYTES:
                        continue
                    target = Path(tmp) / str(index)
                    target.mkdir(exist_ok=True)
                    try:
                        envelopes.append(attest.read_envelope(
                            self.client.download_artifacts(run.info.run_id, info.path, str(target))))
                    except (attest.SignatureInvalid, InputError) as err:
                        log.debug("skipped %s of run %s: %s", info.path, run.info.run_id, err)
        return envelopes

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        """One new JSON file per attempt (`promotions/<time>-<id>.json`) in the experiment's promotion-log run,
        and a copy in this promote run. Append-only by construction: no record is ever read back and
        rewritten, so concurrent promotions cannot lose each other's records."""
        file_name, data = conv.promotion_record(record)
        log_run = self._promotion_log_run(name)
        with tempfile.TemporaryDirectory() as tmp, self.tracking.mapped("append to the promotion log"):
            (Path(tmp) / file_name).write_bytes(data)
            for run_id in (log_run, self.run.run_id):
                self.client.log_artifact(run_id, str(Path(tmp) / file_name), conv.PROMOTION_LOG_DIR)

    def announce(self, name: str, alias: str) -> None:
        """Mark this promote run as a contender for `name@alias`, with the process that runs it."""
        self._alias = alias  # the registered model's description names it
        with self.tracking.mapped(f"announce the promotion to {name}@{alias}"):
            self.client.set_tag(self.run.run_id, conv.PROMOTE_TARGET_TAG, _target(name, alias))
            self.client.set_tag(self.run.run_id, conv.PROCESS_TAG, process_identity())

    def claim(self, name: str, alias: str, version: str) -> None:
        """The version this promote run is about to move `name@alias` to."""
        with self.tracking.mapped(f"claim {name}@{alias} for v{version}"):
            self.client.set_tag(self.run.run_id, conv.PROMOTE_VERSION_TAG, version)

    def contenders(self, name: str, alias: str, version: str) -> list[str]:
        """The other promote runs of this experiment still under way (RUNNING, their process not known to be
        gone, started less than `STALE_RUN_AFTER_S` ago) that target `name@alias` — or have not said yet which
        target, for at most `UNANNOUNCED_GRACE_S` after they started (a promotion announces its target within
        seconds; one that never did was left by a crash, and must not hold every later promotion for minutes) —
        and have not claimed this same version. Names are compared here, never put into a filter."""
        now_ms = time.time() * 1000
        with self.tracking.mapped(f"find promotions to {name}@{alias} under way"):
            runs = self.client.search_runs([self.tracking.experiment_id],
                                           "attributes.status = 'RUNNING' and tags.`skewgate.step` = 'promote'",
                                           max_results=1000)
        found = []
        for run in runs:
            tags = run.data.tags
            age_s = (now_ms - (run.info.start_time or 0)) / 1000
            announced = conv.PROMOTE_TARGET_TAG in tags
            if run.info.run_id == self.run.run_id or tags.get(conv.PROMOTE_VERSION_TAG) == version or \
                    tags.get(conv.PROMOTE_TARGET_TAG, _target(name, alias)) != _target(name, alias) or \
                    process_gone(tags.get(conv.PROCESS_TAG, "")) or age_s > STALE_RUN_AFTER_S or \
                    (not announced and age_s > UNANNOUNCED_GRACE_S):
                continue
            found.append(str(run.info.run_id))
        return found

    def _promotion_log_run(self, name: str) -> str:
        """The experiment's promotion-log run (a FINISHED run that only holds records), created when there is
        none. Two promotions that both create one at once leave two, and both are kept: deleting one could race
        with a record being written into it (the creation times are the clients' clocks, so "the oldest" can
        change after a writer chose it). Writers then all take the oldest; readers read every promotion-log run."""
        experiment = self.tracking.experiment_id
        query = f"tags.`{conv.PROMOTION_LOG_TAG}` = '{conv.PROMOTION_LOG_KIND}'"
        with self.tracking.mapped("find the promotion-log run"):
            found = self.client.search_runs([experiment], query, max_results=50)
        if not found:
            with self.tracking.mapped("create the promotion-log run"):
                created = self.client.create_run(experiment, run_name=f"promotion-log:{name}",
                                                 tags={conv.PROMOTION_LOG_TAG: conv.PROMOTION_LOG_KIND})
                self.client.set_terminated(created.info.run_id, status="FINISHED")
                found = self.client.search_runs([experiment], query, max_results=50)
            if not found:
                raise Inconsistent(f"MLflow at {self.tracking.uri}: promotion-log run {created.info.run_id} was "
                                   "created, yet a search for it finds none")
        return str(min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id)


STALE_RUN_AFTER_S = 6 * 3600.0  # a RUNNING run this old whose process cannot be checked is taken as dead
UNANNOUNCED_GRACE_S = 30.0  # a promote run that has not named its target this long after it started never will


def _target(name: str, alias: str) -> str:
    return f"{name}@{alias}"


def _process_stat(pid: int) -> tuple[str, str]:
    """(state, start time in clock ticks since boot) of a process (Linux /proc), ("", "") where unknown: with the
    pid, the start time tells a live process from a later one that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", ""
    fields = stat[stat.rfind(")") + 2:].split()
    return (fields[0], fields[19]) if len(fields) > 19 else ("", "")


def process_identity() -> str:
    """`host:pid:start` of this process (`conv.PROCESS_TAG`)."""
    import socket

    return f"{socket.gethostname()}:{os.getpid()}:{_process_stat(os.getpid())[1]}"


def process_gone(identity: str) -> bool:
    """Whether the process `process_identity()` named is known to have ended (or is a zombie): only a process of
    this host can be checked; another host's, or a malformed tag, is not known to be gone."""
    import socket

    parts = identity.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return False
    pid, start = int(parts[1]), parts[2]
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # alive, and someone else's
    except OSError:
        return False
    state, now = _process_stat(pid)
    return state in ("Z", "X") or (bool(start) and bool(now) and now != start)


def end_stale_runs(tracking: Tracking, *, current_run_id: str, pipeline_run_id: str = "",
                   older_than_s: float = STALE_RUN_AFTER_S) -> list[str]:
    """End as KILLED the RUNNING runs of this experiment left by a process that is gone: those whose
    `conv.PROCESS_TAG` names a process of this host that has ended, and any other started more than `older_than_s`
    ago — never this run, its parent, nor a run of this pipeline run. An ad-hoc CLI call's parent run
    (no pipeline run id) ends with its killed step. Returns the run ids ended; a failure is only logged."""
    from mlflow.entities import RunTag

    ended: list[str] = []
    try:
        with tracking.mapped("find runs left RUNNING"):
            runs = tracking.client.search_runs([tracking.experiment_id], "attributes.status = 'RUNNING'",
                                               max_results=1000)
            by_id = {str(r.info.run_id): r for r in runs}
            mine = by_id.get(current_run_id)
            keep = {current_run_id, mine.data.tags.get("mlflow.parentRunId", "") if mine else ""}
            now_ms = time.time() * 1000
            for run_id, run in by_id.items():
                tags = run.data.tags
                if run_id in keep or (pipeline_run_id and tags.get(conv.PIPELINE_RUN_TAG) == pipeline_run_id):
                    continue
                gone = process_gone(tags.get(conv.PROCESS_TAG, ""))
                if not gone and now_ms - (run.info.start_time or now_ms) <= older_than_s * 1000:
                    continue
                why = (f"process {tags[conv.PROCESS_TAG]} is gone" if gone
                       else f"still RUNNING {older_than_s / 3600:g} h after it started")
                stale = [run_id]
                parent = by_id.get(tags.get("mlflow.parentRunId", ""))
                if parent is not None and not parent.data.tags.get(conv.PIPELINE_RUN_TAG) and \
                        str(parent.info.run_id) not in keep:
                    stale.append(str(parent.info.run_id))
                for stale_id in stale:
                    if stale_id in ended:
                        continue
                    tracking.client.log_batch(stale_id, tags=[RunTag(conv.ENDED_AS_STALE_TAG, why[:5000])])
                    tracking.client.set_terminated(stale_id, status="KILLED")
                    ended.append(stale_id)
                    log.info("ended run %s as KILLED: %s", stale_id, why)
    except BackendError as err:
        log.warning("runs left RUNNING not ended: %s", err)
    return ended
