"""An in-memory registry behind promote's `Registry` protocol, for unit tests of the decision and the order
of registry operations. The real MLflow registry is exercised in tests/common and tests/integration."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class FakeRegistry:
    def __init__(self, *, drop_tags_on_write: bool = False) -> None:
        self.versions: dict[str, dict[str, dict[str, str]]] = {}  # model → version → tags
        self.aliases: dict[str, dict[str, str]] = {}
        self.log: list[dict[str, Any]] = []
        self.drop_tags_on_write = drop_tags_on_write  # simulate a registry that loses writes

    def model_exists(self, name: str) -> bool:
        return name in self.versions

    def version_exists(self, name: str, version: str) -> bool:
        return version in self.versions.get(name, {})

    def find_version(self, name: str, sha256: str) -> str | None:
        for version, tags in self.versions.get(name, {}).items():
            if tags.get("skewgate.onnx_sha256") == sha256:
                return version
        return None

    def register(self, name: str, artifact: Path, sha256: str) -> str:
        versions = self.versions.setdefault(name, {})
        version = str(len(versions) + 1)
        versions[version] = {"skewgate.onnx_sha256": sha256}
        return version

    def get_tags(self, name: str, version: str) -> dict[str, str]:
        return dict(self.versions[name][version])

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        if not self.drop_tags_on_write:
            self.versions[name][version].update(tags)

    def get_alias(self, name: str, alias: str) -> str | None:
        return self.aliases.get(name, {}).get(alias)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        self.aliases.setdefault(name, {})[alias] = version

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        self.log.append(dict(record))
