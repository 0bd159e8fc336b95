"""Fakes at drift's seams: an in-memory registry behind `run.NightlyRegistry` and a step run that records what
would be logged to MLflow. The real MLflow registry is exercised in tests/integration."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from skewgate.common.io import sha256_file
from skewgate.common.registry import Champion
from skewgate.drift.run import PROFILE_SHA_TAG, PROFILE_URI_TAG


class FakeRegistry:
    """One model's versions (tags) and aliases; artifacts are files behind `mem://` URIs."""

    def __init__(self) -> None:
        self.tags: dict[str, dict[str, str]] = {}  # version → tags
        self.aliases: dict[str, str] = {}
        self.artifacts: dict[str, Path] = {}
        self.downloads = 0
        self.reads = 0  # alias lookups: round trips to a remote registry

    def add_champion(self, profile: Path, *, version: str = "3", alias: str = "champion",
                     sha256: str | None = None) -> str:
        """A version carrying `profile` as promote leaves it (URI and digest tags), under `alias`."""
        uri = f"mem://v{version}/profile/reference.profile"
        self.artifacts[uri] = profile
        self.tags[version] = {PROFILE_URI_TAG: uri, PROFILE_SHA_TAG: sha256 or sha256_file(profile)}
        self.aliases[alias] = version
        return version

    def fetch(self, name: str, alias: str, workdir: Path | None = None, *,
              attestations: bool = False) -> Champion | None:
        """The alias's version and its tags, as MLflow answers one lookup; nightly drift never downloads a
        model."""
        assert workdir is None, "nightly drift downloads only the profile its tag names"
        self.reads += 1
        version = self.aliases.get(alias)
        return None if version is None else Champion(model_name=name, alias=alias, version=version,
                                                     tags=dict(self.tags[version]))

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        self.tags[version].update(tags)

    def download(self, artifact_uri: str, directory: Path) -> Path:
        self.downloads += 1
        return Path(shutil.copy(self.artifacts[artifact_uri], directory / Path(artifact_uri).name))


class FakeStepRun:
    """What `publish` and `gate_in_run` log: tables by file name, artifacts by (name, folder)."""

    run_id = "run-1"

    def __init__(self) -> None:
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.artifacts: dict[tuple[str, str | None], bytes] = {}

    def log_table(self, artifact_file: str, rows: list[dict[str, Any]]) -> None:
        self.tables[artifact_file] = rows

    def log_artifact_as(self, source: str | Path, name: str, artifact_path: str | None = None) -> str:
        self.artifacts[(name, artifact_path)] = Path(source).read_bytes()
        return f"mem://{self.run_id}/{artifact_path}" if artifact_path else f"mem://{self.run_id}"
