"""compare's verdict counts only for the champion the promotion replaces: the registry it judged in (its identity),
the model, and the version the alias holds now (or none, only while the alias is unset). A comparison made
against a mistyped store's empty registry, another registry, or a champion that has moved since is refused, and the
registry is left as it was."""

import pytest

from skewgate.common.io import sha256_file
from skewgate.common.verdict import Subject, Verdict
from tests.promote.fake_registry import FakeRegistry
from tests.promote.test_core import NAME, PASSING, _verdict, _write, promote

REQUIRED = ("export", "compare")


def _compare(sha, *, registry=FakeRegistry.identity, model_name=NAME, champion_version=None):
    details = {"task": "classification", "samples": 64, "registry": registry, "model_name": model_name}
    if champion_version is not None:
        details["champion_version"] = champion_version
    return Verdict.from_checks("compare", PASSING, subject=Subject("m.onnx", sha), details=details)


def _registry_with_champion():
    registry = FakeRegistry()
    registry.versions[NAME] = {"1": {"skewgate.onnx_sha256": "0" * 64}, "2": {"skewgate.onnx_sha256": "1" * 64}}
    registry.aliases[NAME] = {"champion": "1"}
    return registry


def _promote(tmp_path, onnx, registry, compare):
    sha = sha256_file(onnx)
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha), compare)
    return promote(model_name=NAME, onnx=onnx, verdicts_dir=verdicts, registry=registry, required=REQUIRED)


def test_a_first_promotion_judged_against_no_champion_in_this_registry_moves_the_alias(onnx_file, tmp_path):
    registry = FakeRegistry()
    result = _promote(tmp_path, onnx_file, registry, _compare(sha256_file(onnx_file)))
    assert result.status == "pass", result.message
    assert registry.aliases[NAME]["champion"] == "1"
    assert "compare.champion" in [c.name for c in result.checks if c.passed]


def test_a_comparison_against_the_champion_the_alias_holds_moves_the_alias(onnx_file, tmp_path):
    registry = _registry_with_champion()
    result = _promote(tmp_path, onnx_file, registry, _compare(sha256_file(onnx_file), champion_version="1"))
    assert result.status == "pass", result.message
    assert registry.aliases[NAME]["champion"] == "3"


@pytest.mark.parametrize(("changes", "named"), [
    pytest.param({"registry": "sqlite:////srv/mlfow.db"}, "compare judged in the registry sqlite:////srv/mlfow.db, "
                 f"not {FakeRegistry.identity}", id="mistyped-store"),
    pytest.param({"champion_version": None}, f"compare judged against no champion, but {NAME}@champion holds "
                 "version 1", id="no-champion-but-the-alias-is-set"),
    pytest.param({"champion_version": "2"}, f"compare judged against version 2, but {NAME}@champion holds version 1",
                 id="champion-moved-since"),
    pytest.param({"model_name": "other"}, "compare judged model 'other', not 'digits'", id="another-model"),
    pytest.param({"registry": None}, "compare judged in the registry (unnamed)", id="verdict-names-no-registry"),
])
def test_a_comparison_against_anything_but_this_champion_is_refused(onnx_file, tmp_path, changes, named):
    registry = _registry_with_champion()
    arguments = {"registry": FakeRegistry.identity, "model_name": NAME, "champion_version": "1", **changes}
    before = {name: dict(tags) for name, tags in registry.versions[NAME].items()}
    result = _promote(tmp_path, onnx_file, registry, _compare(sha256_file(onnx_file), **arguments))
    assert result.status == "fail"
    (check,) = [c for c in result.checks if c.name == "compare.champion"]
    assert not check.passed and named in check.detail, check.detail
    assert registry.aliases[NAME] == {"champion": "1"}
    assert {v: registry.versions[NAME][v] for v in before} == before
