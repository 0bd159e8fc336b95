"""What a registry alias points at, read (`RegistryChampions`, the `common.registry.ChampionReader` of verify,
compare and nightly drift; promote's `MlflowRegistry` is one too), and artifacts downloaded by URI."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skewgate.common import mlflow_conventions as conv
from skewgate.common.mlflow_log._client import (
    _mapped,
    _or_none,
    http_defaults,
    registry_identity,
    require_store,
    retry_until,
)
from skewgate.common.registry import Champion

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from skewgate.common.mlflow_log.tracking import Tracking


class RegistryChampions:
    """Reads the registry at `uri`, never writes to it. Built on a step's connection (`of`: reached already, under
    the step's deadline), or on its own (`connect`: no experiment, no run, for `skewgate verify`), when each
    lookup is retried until `deadline_s` has passed (`retry_until`) and each download times out on its own."""

    def __init__(self, uri: str, client: MlflowClient, *, deadline_s: float | None = None) -> None:
        self.uri = uri
        self.client = client
        self.deadline_s = deadline_s

    @classmethod
    def connect(cls, uri: str, *, deadline_s: float = 30.0) -> RegistryChampions:
        require_store(uri)
        http_defaults()
        from mlflow import MlflowClient

        return cls(uri, MlflowClient(tracking_uri=uri, registry_uri=uri), deadline_s=deadline_s)

    @property
    def identity(self) -> str:
        """The registry's stable name (`registry_identity`): what compare's verdict names and promote matches."""
        return registry_identity(self.uri)

    @classmethod
    def of(cls, tracking: Tracking) -> RegistryChampions:
        return cls(tracking.uri, tracking.client)

    def fetch(self, name: str, alias: str, workdir: Path | None = None, *,
              attestations: bool = False) -> Champion | None:
        """The version `alias` points at and its tags, in one lookup; None when the model or the alias does not
        exist. With `workdir`, its MLflow Model is downloaded into `workdir/model`, and with `attestations` the
        ones its `conv.attestation_uri_tag(alias)` names into `workdir/attestations`. Downloaded from the version's own
        artifact location, not `models:/…`, which mlflow resolves against its process-wide registry URI (which
        need not be this one)."""

        def lookup() -> Any:  # the `ModelVersion`, or None
            return _or_none(self.uri, f"look up {name}@{alias}",
                            lambda: self.client.get_model_version_by_alias(name, alias))

        found = lookup() if self.deadline_s is None else retry_until(self.uri, self.deadline_s, lookup)
        if found is None:
            return None
        champion = Champion(model_name=name, alias=alias, version=str(found.version), tags=dict(found.tags))
        if workdir is None:
            return champion
        with _mapped(self.uri, f"locate the files of {name!r} v{champion.version}"):
            source = self.client.get_model_version_download_uri(name, champion.version)
        # a version promoted before decisions were kept per alias has one tag (its decision still names its alias)
        stored = (champion.tags.get(conv.attestation_uri_tag(alias)) or champion.tags.get(conv.ATTESTATION_URI_TAG)
                  if attestations else None)
        refused = attestations_outside(stored, str(source)) if stored else ""
        return dataclasses.replace(
            champion, model_dir=self.download(str(source), workdir / "model"), attestations_refused=refused,
            attestations_dir=self.download(stored, workdir / "attestations") if stored and not refused else None)

    def download(self, artifact_uri: str, directory: Path) -> Path:
        """Fetch one artifact by URI (as recorded in a tag) into `directory`."""
        import mlflow.artifacts

        with _mapped(self.uri, f"download {artifact_uri}"):
            return Path(mlflow.artifacts.download_artifacts(artifact_uri=artifact_uri, dst_path=str(directory),
                                                            tracking_uri=self.uri))


# A run's artifacts in MLflow's artifact store: `<experiment root>/<run id>/artifacts/…`
_RUN_ARTIFACTS = re.compile(r"(?P<root>.+)/[0-9a-f]{32}/artifacts/")


def attestations_outside(uri: str, source: str) -> str:
    """Why `uri` (a tag's value: anyone with write access to the registry can set it) is not a promote run's
    attestations folder in the artifact store the version's own files (`source`) are in; "" when it is. So a
    tag cannot make a reader copy `/dev/zero`, a device, or another store's files."""
    found = _RUN_ARTIFACTS.match(source)
    if found is None:
        return f"the version's files ({source}) are not a run's artifacts, so no attestations folder is trusted"
    pattern = re.escape(found["root"]) + r"/[0-9a-f]{32}/artifacts/attestations/v[0-9]+"
    if not re.fullmatch(pattern, uri):
        return (f"the attestations tag names {uri[:200]!r}, not the attestations/v<N> folder of a run in "
                f"{found['root']}")
    return ""


def alias_version(tracking: Tracking, name: str, alias: str) -> str | None:
    """The version an alias points at, or None when the model or the alias does not exist."""
    found = RegistryChampions.of(tracking).fetch(name, alias)
    return None if found is None else found.version
