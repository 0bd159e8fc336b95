"""`skewgate compare` against a real MLflow registry, the champion registered by `skewgate promote` itself (so
the test follows whatever layout promote writes); the last test runs against a real `mlflow server`."""

import json
import re

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from skewgate.common.cli_support import write_report
from skewgate.common.io import sha256_file
from skewgate.common.recording import StepResult
from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.export.run import ExportOptions
from tests.compare import models
from tests.support.mlflow_server import mlflow_server

NAME = "digits-lr"


class Registry:
    def __init__(self, uri, root):
        self.uri, self.root = uri, root

    def promote(self, onnx_path, *, require="export", verdicts=None):
        """Promote `onnx_path` on a passing export verdict (plus whatever is in `verdicts`)."""
        folder = verdicts or self.root / f"verdicts-{sha256_file(onnx_path)[:8]}"
        folder.mkdir(parents=True, exist_ok=True)
        export = Verdict.from_checks("export", [Check("ok", passed=True)],
                                     subject=Subject(str(onnx_path), sha256_file(onnx_path))
                                     ).judged_with(ExportOptions())
        # signed with $SKEWGATE_SIGNING_KEY, as the export step's report is
        write_report(StepResult.unrecorded(export), folder / "export.json")
        return main(["promote", "--model-name", NAME, "--onnx", str(onnx_path), "--verdicts", str(folder),
                     "--require", require, "--tracking-uri", self.uri, "--experiment", NAME, "-q"])

    def compare(self, onnx_path, eval_data, *extra, report=None):
        report = report or self.root / "compare.json"
        code = main(["compare", "--onnx", str(onnx_path), "--model-name", NAME, "--eval", str(eval_data),
                     "--report", str(report), "--tracking-uri", self.uri, "--experiment", NAME, "-q", *extra])
        return code, Verdict.read(report)


@pytest.fixture
def signed(tmp_path, monkeypatch):
    """Every report signed with a fresh key, and promote trusting it, as in a pipeline."""
    from skewgate.common import attest

    key, public = attest.generate_keys(tmp_path / "keys")
    monkeypatch.setenv(attest.SIGNING_KEY_ENV, str(key))
    monkeypatch.setenv(attest.TRUSTED_KEYS_ENV, str(public))


@pytest.fixture
def registry(mlflow_db, tmp_path, signed):
    return Registry(mlflow_db, tmp_path)


def test_no_champion_passes(registry, digits_models):
    built, data, _ = digits_models
    code, verdict = registry.compare(built["weak"], data)
    assert code == 0 and verdict.status == "pass"
    assert "first promotion" in verdict.check("champion").detail


@pytest.mark.parametrize(("champion", "candidate", "code"),
                         [("weak", "strong", 0), ("strong", "strong_other_rows", 0), ("strong", "weak", 1)],
                         ids=["better", "equal-within-interval", "worse"])
def test_candidate_against_the_promoted_champion(registry, digits_models, champion, candidate, code):
    built, data, _ = digits_models
    assert registry.promote(built[champion]) == 0
    exit_code, verdict = registry.compare(built[candidate], data)
    assert exit_code == code, verdict.message
    assert verdict.details["champion"]["sha256"] == sha256_file(built[champion])
    assert verdict.registry_tags == {"skewgate.compare.champion_version": "1",
                                                "skewgate.compare.champion_sha256": sha256_file(built[champion])}
    assert verdict.subject.sha256 == sha256_file(built[candidate])


def test_verdict_and_table_reach_mlflow(registry, digits_models, tmp_path):
    built, data, _ = digits_models
    assert registry.promote(built["strong"]) == 0
    code, _ = registry.compare(built["weak"], data, "--markdown", str(tmp_path / "table.md"))
    assert code == 1
    client = MlflowClient(registry.uri)
    run = client.search_runs([client.get_experiment_by_name(NAME).experiment_id],
                             "tags.`skewgate.step` = 'compare'")[0]
    assert run.data.tags["skewgate.status"] == "fail"
    assert run.data.metrics["compare.accuracy.vs_champion"] > 0.03  # a regression of more than 3 points
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {
        "compare.verdict.json", "checks.json", "comparison.json", "comparison.md"}
    table = (tmp_path / "table.md").read_text()
    assert "| \\(all\\) | accuracy |" in table and "**blocked**" in table


def test_champion_not_matching_its_evidence_is_an_error_and_nothing_is_promoted(registry, digits_models, tmp_path):
    built, data, _ = digits_models
    assert registry.promote(built["strong"]) == 0
    stored = [p for p in (tmp_path / "artifacts").rglob("model.onnx") if p.parent.name == "model"]
    assert len(stored) == 1
    stored[0].write_bytes(built["weak"].read_bytes())  # the registry's file is no longer the one judged
    verdicts = tmp_path / "candidate-verdicts"
    code, verdict = registry.compare(built["strong_other_rows"], data, report=verdicts / "compare.json")
    assert code == 2 and verdict.status == "error"
    assert "skewgate.onnx_sha256" in verdict.message and sha256_file(built["weak"]) in verdict.message
    assert registry.promote(built["strong_other_rows"], require="export,compare", verdicts=verdicts) == 1
    client = MlflowClient(registry.uri)
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "1"
    reason = client.get_model_version(NAME, "2").tags["skewgate.promotion.champion.reason"]
    assert "evidence.compare: status error" in reason


def test_promote_requires_compare_and_blocks_the_worse_candidate(registry, digits_models, tmp_path):
    built, data, _ = digits_models
    assert registry.promote(built["strong"]) == 0
    for name, expected in (("weak", 1), ("strong_other_rows", 0)):
        verdicts = tmp_path / f"verdicts-{name}"
        registry.compare(built[name], data, report=verdicts / "compare.json")
        assert registry.promote(built[name], require="export,compare", verdicts=verdicts) == expected
    client = MlflowClient(registry.uri)
    refused = client.get_model_version(NAME, "2").tags
    assert refused["skewgate.promotion.champion.status"] == "refused"
    assert "evidence.compare: status fail: failed: accuracy.vs_champion" in \
        refused["skewgate.promotion.champion.reason"]
    promoted = client.get_model_version_by_alias(NAME, "champion")
    assert str(promoted.version) == "3"
    # the version's description holds each step's row (its tags stay a handful)
    assert re.search(r"^\| compare \| pass \|", promoted.description, re.MULTILINE), promoted.description


def test_regression_outputs(registry, tmp_path):
    split = models.diabetes(seed=2)
    np.savez(tmp_path / "eval.npz", x=split.eval_x, labels=split.eval_y)
    fitted = models.regressor(tmp_path / "fitted.onnx", split, alpha=0.01)
    shrunk = models.regressor(tmp_path / "shrunk.onnx", split, alpha=5.0)
    assert registry.promote(fitted) == 0
    code, verdict = registry.compare(shrunk, tmp_path / "eval.npz")
    assert code == 1 and verdict.details["task"] == "regression"
    assert "mae.vs_champion" in verdict.message
    code, verdict = registry.compare(shrunk, tmp_path / "eval.npz", "--threshold",
                                     "mae:max_relative_regression=1;rmse:max_relative_regression=1")
    assert code == 0, verdict.message


def test_slice_names_are_escaped_in_the_table(registry, digits_models, tmp_path):
    built, _, split = digits_models
    group = np.where(split.eval_y % 2 == 0, "<img src=x onerror=alert(1)>|even", "[odd](javascript:x)")
    np.savez(tmp_path / "eval.npz", x=split.eval_x, labels=split.eval_y, group=group)
    assert registry.promote(built["strong"]) == 0
    code, verdict = registry.compare(built["weak"], tmp_path / "eval.npz", "--slice-key", "group",
                                     "--markdown", str(tmp_path / "table.md"))
    assert code == 1
    assert {s["slice"] for s in verdict.details["slices"]["slices"]} == set(np.unique(group))
    table = (tmp_path / "table.md").read_text()
    assert "<img" not in table and "](javascript" not in table
    assert "&lt;img src=x onerror=alert\\(1\\)&gt;\\|even" in table


def test_labels_key_names_the_labels_array(registry, digits_models, tmp_path):
    built, _data, split = digits_models
    np.savez(tmp_path / "eval.npz", x=split.eval_x, digit=split.eval_y)
    code, verdict = registry.compare(built["strong"], tmp_path / "eval.npz", "--labels-key", "digit")
    assert code == 0 and verdict.details["samples"] == len(split.eval_y)


def test_labels_under_another_name_exit_2_naming_the_option(registry, digits_models, tmp_path, capsys):
    built, _data, split = digits_models
    np.savez(tmp_path / "eval.npz", x=split.eval_x, digit=split.eval_y)
    code, verdict = registry.compare(built["strong"], tmp_path / "eval.npz")
    assert code == 2
    assert "eval.npz: labels: expected a `labels` array of labels (name another with --labels-key" in verdict.message
    assert "found arrays ['digit', 'x']" in capsys.readouterr().err


def test_short_labels_exit_2_blaming_the_labels_with_both_lengths(registry, digits_models, tmp_path, capsys):
    built, _data, split = digits_models
    n = len(split.eval_x)
    np.savez(tmp_path / "eval.npz", x=split.eval_x, digit=split.eval_y[:10])
    code, verdict = registry.compare(built["strong"], tmp_path / "eval.npz", "--labels-key", "digit")
    assert code == 2
    message = (f"eval.npz: digit: expected one label per sample: {n} labels, as many as the samples of input `x` "
               "in eval.npz, found 10 labels in the `digit` array of eval.npz")
    assert message in verdict.message and message in capsys.readouterr().err


def test_bad_threshold_exits_2(registry, digits_models):
    built, data, _ = digits_models
    code, verdict = registry.compare(built["strong"], data, "--threshold", "accuracy:floor=high")
    assert code == 2 and "accuracy:floor=high" in verdict.message


@pytest.mark.integration
def test_against_a_real_mlflow_server(digits_models, tmp_path, signed):
    built, data, _ = digits_models
    with mlflow_server(tmp_path / "server") as url:
        registry = Registry(url, tmp_path)
        assert registry.compare(built["weak"], data)[0] == 0  # nothing registered yet
        assert registry.promote(built["strong"]) == 0
        code, verdict = registry.compare(built["weak"], data)
        assert code == 1 and verdict.details["champion_version"] == "1"
        assert json.loads(verdict.to_json())["details"]["champion"]["sha256"] == sha256_file(built["strong"])


def test_promote_takes_a_comparison_only_from_the_registry_it_promotes_into(registry, digits_models, tmp_path,
                                                                             _empty_mlflow_store):
    """A second real store (a mistyped path that happens to exist, another team's registry) has no champion: compare
    passes there as a first promotion, and promote into the registry that has one refuses that verdict, leaving the
    alias where it was; the same candidate compared in the right registry is promoted."""
    import shutil

    built, data, _ = digits_models
    assert registry.promote(built["strong"]) == 0
    shutil.copyfile(_empty_mlflow_store, tmp_path / "other.db")
    other = Registry(f"sqlite:///{tmp_path / 'other.db'}", tmp_path / "other")
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    code, verdict = other.compare(built["strong_other_rows"], data, report=evidence / "compare.json")
    assert code == 0 and "first promotion" in verdict.check("champion").detail
    assert verdict.details["registry"] == f"sqlite://{tmp_path / 'other.db'}"
    assert registry.promote(built["strong_other_rows"], require="export,compare", verdicts=evidence) == 1
    client = MlflowClient(registry.uri)
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "1"
    code, verdict = registry.compare(built["strong_other_rows"], data, report=evidence / "compare.json")
    assert code == 0 and verdict.details["champion_version"] == "1", verdict.message
    assert registry.promote(built["strong_other_rows"], require="export,compare", verdicts=evidence) == 0
    assert str(client.get_model_version_by_alias(NAME, "champion").version) == "2"
