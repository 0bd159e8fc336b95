import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from skewgate.common import attest
from skewgate.common.errors import Inconsistent, InputError
from skewgate.common.io import sha256_file
from skewgate.common.policy import GatePolicy
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.promote.core import Policy, decide
from skewgate.promote.core import promote as promote_core
from tests.promote.fake_registry import FakeRegistry
from tests.support.verdicts import at_defaults

NAME = "digits"


def _key() -> attest.SigningKey:
    key = Ed25519PrivateKey.generate()
    return attest.SigningKey(key, attest.keyid(key.public_key()))


PIPELINE_KEY, OTHER_KEY = _key(), _key()
TRUSTED = {PIPELINE_KEY.keyid: PIPELINE_KEY.key.public_key()}


def promote(*, required=("export",), allow_warn=False, trusted=TRUSTED, pipeline_run_id="", alias="champion",
            **kwargs):
    """promote with a policy that trusts the pipeline's key and requires `export` unless told otherwise."""
    policy = Policy(gates=GatePolicy(required=tuple(required), allow_warn=allow_warn),
                    trusted_keys=trusted, pipeline_run_id=pipeline_run_id)
    return promote_core(policy=policy, alias=alias, signing_key=PIPELINE_KEY, **kwargs)


def _verdict(step, status_checks, sha):
    return at_defaults(Verdict.from_checks(step, status_checks, subject=Subject(artifact="m.onnx", sha256=sha)))


def _write(directory, *verdicts, key=PIPELINE_KEY, context=None):
    """Each verdict and, unless `key` is None, its envelope signed with `key` (in the run `context`: none for an
    ad-hoc verdict), as the steps write them: saying its settings (the step's defaults unless it says its own)."""
    directory.mkdir(exist_ok=True)
    for verdict in map(at_defaults, verdicts):
        path = verdict.write(directory / f"{verdict.step}.json")
        if key is not None:
            attest.write_envelope(attest.sign(attest.verdict_statement(verdict, context), key),
                                  attest.envelope_path(path))
    return directory


PASSING = [Check("c", passed=True)]
FAILING = [Check("c", passed=False, detail="broken")]
WARNING = [Check("c", passed=False, severity="warn")]


def test_all_evidence_passes_so_the_alias_moves(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "pass"
    assert registry.aliases[NAME]["champion"] == "1"
    tags = registry.versions[NAME]["1"]
    assert tags["skewgate.onnx_sha256"] == sha256_file(onnx_file)
    assert tags["skewgate.promotion.champion.status"] == "promoted" and "skewgate.attestation.champion.uri" in tags
    assert len(tags) <= 6  # the per-step evidence is the description's table
    row = f"| export | pass | all 1 checks passed | `{sha256_file(verdicts / 'export.json')[:12]}` |"
    assert row in registry.descriptions[(NAME, "1")]
    assert registry.log[-1]["promoted"] is True


@pytest.mark.parametrize(
    ("checks", "allow_warn", "status"),
    [
        pytest.param(FAILING, False, "fail", id="failed-gate"),
        pytest.param(WARNING, False, "fail", id="warn-not-allowed"),
        pytest.param(WARNING, True, "pass", id="warn-allowed"),
    ],
)
def test_status_of_the_evidence_decides(onnx_file, tmp_path, checks, allow_warn, status):
    verdicts = _write(tmp_path / "v", _verdict("export", checks, sha256_file(onnx_file)))
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry,
                     allow_warn=allow_warn)
    assert result.status == status
    assert (registry.get_alias(NAME, "champion") is not None) == (status == "pass")


def test_refusal_tags_the_version_with_the_reason_and_leaves_the_alias(onnx_file, tmp_path):
    registry = FakeRegistry()
    registry.versions[NAME] = {"1": {"skewgate.onnx_sha256": "0" * 64}}
    registry.aliases[NAME] = {"champion": "1"}
    verdicts = _write(tmp_path / "v", _verdict("export", FAILING, sha256_file(onnx_file)))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "fail"
    assert registry.aliases[NAME]["champion"] == "1"
    tags = registry.versions[NAME]["2"]
    assert tags["skewgate.promotion.champion.status"] == "refused"
    assert tags["skewgate.promotion.champion.reason"] == "evidence.export: status fail: failed: c"
    assert registry.log[-1] | {"promoted": False, "previous": "1"} == registry.log[-1]


def test_tampered_onnx_is_refused(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    import onnx

    model = onnx.load(str(onnx_file))
    model.graph.initializer[0].float_data[:] = [2.0] * 8  # still valid ONNX, different bytes
    model.graph.initializer[0].ClearField("raw_data")
    onnx.save(model, str(onnx_file))
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "fail"
    assert "the file to promote is" in result.message
    assert registry.get_alias(NAME, "champion") is None


def test_missing_required_verdict_is_refused(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry,
                     required=["export", "drift"])
    assert result.status == "fail"
    assert "evidence.drift: no verdict" in result.message


def test_no_required_steps_means_fail(onnx_file, tmp_path):
    """Empty means fail: a policy requiring nothing gives no checks, and promote refuses on no checks."""
    assert decide({}, artifact_sha256="x", policy=Policy(gates=GatePolicy(required=()))) == []
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, required=())
    assert result.status == "fail" and result.checks == ()
    assert registry.get_alias(NAME, "champion") is None


def test_same_promotion_twice_creates_one_version(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    for _ in range(2):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert list(registry.versions[NAME]) == ["1"]
    assert len(registry.log) == 2


def test_tags_that_do_not_read_back_stop_the_alias(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry(drop_tags_on_write=True)
    with pytest.raises(Inconsistent, match="did not read back"):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert registry.get_alias(NAME, "champion") is None


def test_existing_version_of_a_missing_model_is_bad_input_and_touches_nothing(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    with pytest.raises(InputError, match="--model-name: digits: expected a registered model"):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, version="3")
    assert registry.versions == {} and registry.aliases == {} and registry.log == []


def test_existing_version_must_hold_the_same_artifact(onnx_file, tmp_path):
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    registry = FakeRegistry()
    registry.versions[NAME] = {"1": {"skewgate.onnx_sha256": "something-else"}}
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, version="1")
    assert result.status == "fail"
    assert "registry.same_artifact" in result.message
    assert registry.get_alias(NAME, "champion") is None


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        pytest.param(lambda d, f: f.write_bytes(b"not onnx"), "expected a valid ONNX model", id="not-onnx"),
        pytest.param(lambda d, f: (d / "x.json").write_text("{"), "invalid JSON", id="bad-verdict-json"),
        pytest.param(lambda d, f: _write(d, _verdict("export", PASSING, "a" * 64), ).joinpath("again.json")
                     .write_text((d / "export.json").read_text()), "a second verdict", id="duplicate-step"),
    ],
)
def test_bad_input_raises_before_the_registry_is_touched(onnx_file, tmp_path, setup, message):
    verdicts = tmp_path / "v"
    verdicts.mkdir()
    setup(verdicts, onnx_file)
    registry = FakeRegistry()
    with pytest.raises(InputError, match=message):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert registry.versions == {} and registry.log == []


class RacingRegistry(FakeRegistry):
    """Another promotion moves the alias to `winner` right after ours (`winner` None: our move never lands and
    fails); `pending` promotions of other versions are under way for the first so many read-backs."""

    def __init__(self, *, winner=None, fail=False, pending=0):
        super().__init__()
        self.winner, self.fail, self.pending, self.calls = winner, fail, pending, []

    def set_alias(self, name, alias, version):
        self.calls.append("set_alias")
        if self.fail:
            from skewgate.common.errors import Unreachable

            raise Unreachable("connection reset")
        super().set_alias(name, alias, self.winner or version)

    def append_promotion_log(self, name, record):
        self.calls.append("append_promotion_log")
        super().append_promotion_log(name, record)

    def contenders(self, name, alias, version):
        self.pending -= 1
        return ["other-run"] if self.pending >= 0 else []


def test_the_log_record_is_written_after_the_alias_read_back(onnx_file, tmp_path):
    registry = RacingRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "pass" and registry.calls == ["set_alias", "append_promotion_log"]
    assert registry.log[-1] | {"promoted": True, "outcome": "promoted", "alias_version": "1"} == registry.log[-1]


def test_losing_the_race_for_the_alias_exits_2_and_is_logged_as_lost(onnx_file, tmp_path):
    registry = RacingRegistry(winner="7")
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "error" and result.message.startswith("lost the race to v7")
    assert result.details["promoted"] is False and result.details["outcome"] == "lost"
    assert registry.log[-1] | {"promoted": False, "outcome": "lost", "alias_version": "7"} == registry.log[-1]
    assert registry.versions[NAME]["1"]["skewgate.promotion.champion.status"] == "refused"
    assert registry.versions[NAME]["1"]["skewgate.promotion.champion.reason"].startswith("lost the race to v7")


def test_an_alias_move_that_fails_is_logged_as_not_promoted(onnx_file, tmp_path):
    registry = RacingRegistry(fail=True)
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "error" and "connection reset" in result.message
    assert registry.get_alias(NAME, "champion") is None
    assert registry.log[-1] | {"promoted": False, "outcome": "error", "alias_version": None} == registry.log[-1]


def test_holding_the_alias_waits_for_promotions_of_other_versions_under_way(onnx_file, tmp_path, monkeypatch):
    monkeypatch.setattr("skewgate.promote.core.POLL_S", 0.0)
    registry = RacingRegistry(pending=3)
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    result = promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert result.status == "pass" and registry.pending < 0  # asked until none was left


@pytest.mark.parametrize("alias", ["v7", "latest", "champion\n", "a b", ""])
def test_an_alias_mlflow_rejects_raises_before_the_registry_is_touched(onnx_file, tmp_path, alias):
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    with pytest.raises(InputError, match="--alias"):
        promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry, alias=alias)
    assert registry.versions == {} and registry.log == [] and registry.aliases == {}


@pytest.mark.parametrize("name", ["a/b", "a:b", " ", "x\ny", ".."])
def test_a_model_name_mlflow_rejects_raises_before_the_registry_is_touched(onnx_file, tmp_path, name):
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    with pytest.raises(InputError, match="--model-name"):
        promote(model_name=name, onnx=onnx_file, verdicts_dir=verdicts, registry=registry)
    assert registry.versions == {} and registry.log == []
