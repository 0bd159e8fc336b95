"""What the steps need of a model registry, as protocols: MLflow's (`mlflow_log.RegistryChampions`,
`mlflow_log.MlflowRegistry`) in production, in-memory fakes in unit tests. Promote writes through `Registry`;
verify, compare and nightly drift read the champion (`Champion`) through `ChampionReader`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from skewgate.common.mlflow_conventions import ONNX_DIGEST_TAG


@dataclass(frozen=True, kw_only=True)
class Champion:
    """The version `alias` points at: its number and tags (promote's evidence: the gated digest, the drift
    profile, the attestations' URI) and, when it was downloaded, its MLflow Model folder and the promote run's
    stored attestations (`attestations/v<N>`; None when no tag names them)."""

    model_name: str
    alias: str
    version: str
    tags: Mapping[str, str]
    model_dir: Path | None = None
    attestations_dir: Path | None = None
    attestations_refused: str = ""  # why the attestations a tag names were not downloaded (outside the store)

    @property
    def uri(self) -> str:
        """The version's `models:/` URI, by number: what the alias pointed at when it was read."""
        return f"models:/{self.model_name}/{self.version}"

    @property
    def label(self) -> str:
        """For humans: `digits-cnn@champion (version 3)`."""
        return f"{self.model_name}@{self.alias} (version {self.version})"

    @property
    def sha256(self) -> str:
        """The digest promote gated (`skewgate.onnx_sha256`); empty when the version has none."""
        return self.tags.get(ONNX_DIGEST_TAG, "")

    def files(self) -> Path:
        """`model_dir`; a `ValueError` when the reader did not download it (it was asked to, with a `workdir`)."""
        if self.model_dir is None:
            raise ValueError(f"{self.label} was looked up, not downloaded")
        return self.model_dir


class ChampionReader(Protocol):
    """Read-only: what an alias points at (None when the model or the alias does not exist), downloaded into
    `workdir` when one is given (`workdir/model`, and with `attestations` the stored attestations into
    `workdir/attestations`), and an artifact by the URI a tag records (nightly drift's reference profile)."""

    def fetch(self, name: str, alias: str, workdir: Path | None = None, *,
              attestations: bool = False) -> Champion | None: ...
    def download(self, artifact_uri: str, directory: Path) -> Path: ...


def check_tagged_file(path: str | Path, champion: Champion, *, sha_tag: str) -> Path:
    """`path`, which must be the file whose SHA-256 the version carries in `sha_tag` (nothing downloaded from the
    registry is trusted without it); an `InputError` naming the file and the tag otherwise."""
    from skewgate.common.errors import InputError
    from skewgate.common.io import sha256_file

    expected, actual = champion.tags.get(sha_tag), sha256_file(path)
    if actual != expected:
        raise InputError(path, field=sha_tag, expected=expected or "(none)", found=actual)
    return Path(path)


def download_tagged(reader: ChampionReader, champion: Champion, *, uri_tag: str, sha_tag: str,
                    directory: Path) -> Path:
    """The artifact the version's `uri_tag` names (a step's profile), downloaded into `directory` and checked
    against its `sha_tag` (`check_tagged_file`). The caller has checked that `uri_tag` is there."""
    return check_tagged_file(reader.download(champion.tags[uri_tag], directory), champion, sha_tag=sha_tag)


class Registry(Protocol):
    """What promote needs of a model registry (MLflow's in production, an in-memory fake in unit tests)."""

    @property
    def identity(self) -> str: ...  # a stable name of the store, as compare's verdict names the one it judged in

    def model_exists(self, name: str) -> bool: ...
    def version_exists(self, name: str, version: str) -> bool: ...
    def find_version(self, name: str, sha256: str) -> str | None: ...
    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str: ...
    def get_tags(self, name: str, version: str) -> dict[str, str]: ...
    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None: ...
    def get_alias(self, name: str, alias: str) -> str | None: ...
    def set_alias(self, name: str, alias: str, version: str) -> None: ...
    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str: ...
    def set_description(self, name: str, version: str, markdown: str) -> None: ...
    # the verdict envelopes logged inside a pipeline run (unverified: promote checks their signatures)
    def logged_verdict_envelopes(self, pipeline_run_id: str) -> list[dict[str, Any]]: ...
    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None: ...
    # Contention between promotions to one alias (promote/core.py, "Contention"): this promotion announces its
    # target, then the version it will move the alias to; `contenders` are the other promotions to the same
    # alias still under way (their process alive) that did not announce this same version.
    def announce(self, name: str, alias: str) -> None: ...
    def claim(self, name: str, alias: str, version: str) -> None: ...
    def contenders(self, name: str, alias: str, version: str) -> list[str]: ...
