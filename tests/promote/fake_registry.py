"""In-memory registries behind promote's `Registry` protocol, for unit tests of the decision and the order of
registry operations. The real MLflow registry is exercised in tests/promote/test_cli.py and tests/integration."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from skewgate.common.errors import BackendError


class FakeRegistry:
    identity = "memory://fake-registry"

    def __init__(self, *, drop_tags_on_write: bool = False) -> None:
        self.versions: dict[str, dict[str, dict[str, str]]] = {}  # model → version → tags
        self.aliases: dict[str, dict[str, str]] = {}
        self.log: list[dict[str, Any]] = []
        self.attestations: dict[tuple[str, str], dict[str, bytes]] = {}
        self.envelopes: dict[str, list[dict[str, Any]]] = {}  # pipeline run id → envelopes its runs logged
        self.descriptions: dict[tuple[str, str], str] = {}
        self.sources: dict[str, list[str]] = {}  # artifact folder of the promote run → models registered from it
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

    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str:
        sources = self.sources.setdefault(artifact_path, [])
        assert name not in sources, f"{artifact_path} already holds a version of {name} in this run"
        sources.append(name)
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

    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str:
        self.attestations[(name, version)] = dict(files)
        return f"memory://{name}/{version}/attestations"

    def set_description(self, name: str, version: str, markdown: str) -> None:
        self.descriptions[(name, version)] = markdown

    def logged_verdict_envelopes(self, pipeline_run_id: str) -> list[dict[str, Any]]:
        return list(self.envelopes.get(pipeline_run_id, []))

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        self.log.append(dict(record))

    def announce(self, name: str, alias: str) -> None:
        pass

    def claim(self, name: str, alias: str, version: str) -> None:
        pass

    def contenders(self, name: str, alias: str, version: str) -> list[str]:
        return []


MUTATIONS = ("register", "set_tags", "store_attestations", "append_promotion_log", "set_alias", "set_description")


class CrashingRegistry(FakeRegistry):
    """Crashes at the `crash_at`-th write: `before` it happens (the request never arrived) or `after` (it
    landed, then the connection broke), as a process killed or a network cut at that point would."""

    def __init__(self, crash_at: int, when: Literal["before", "after"]) -> None:
        super().__init__()
        self.crash_at, self.when, self.writes = crash_at, when, 0

    def _write(self, method: str, *args: Any) -> Any:
        self.writes += 1
        if self.writes == self.crash_at and self.when == "before":
            raise BackendError(f"crash before {method}")
        result = getattr(FakeRegistry, method)(self, *args)
        if self.writes == self.crash_at:
            raise BackendError(f"crash after {method}")
        return result

    def register(self, name: str, artifact: Path, sha256: str, *, artifact_path: str = "model") -> str:
        self.writes += 1
        if self.writes == self.crash_at and self.when == "before":
            raise BackendError("crash before register")
        version = FakeRegistry.register(self, name, artifact, sha256, artifact_path=artifact_path)
        if self.writes == self.crash_at:
            raise BackendError("crash after register")
        return version

    def set_tags(self, name: str, version: str, tags: Mapping[str, str]) -> None:
        self._write("set_tags", name, version, tags)

    def store_attestations(self, name: str, version: str, files: Mapping[str, bytes]) -> str:
        return str(self._write("store_attestations", name, version, files))

    def append_promotion_log(self, name: str, record: Mapping[str, Any]) -> None:
        self._write("append_promotion_log", name, record)

    def set_alias(self, name: str, alias: str, version: str) -> None:
        self._write("set_alias", name, alias, version)

    def set_description(self, name: str, version: str, markdown: str) -> None:
        self._write("set_description", name, version, markdown)
