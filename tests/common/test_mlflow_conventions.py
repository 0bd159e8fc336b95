"""What skewgate writes into MLflow, by name and shape (pure: no store)."""

import json

import pytest

from skewgate.common import mlflow_conventions as conv
from skewgate.common.markdown import escape
from skewgate.common.verdict import Check, Verdict


@pytest.mark.parametrize(("name", "key"), [
    ("parity.max_abs", "parity.max_abs"),
    ("probe.http:infer", "probe.http_infer"),
    ("drift.feature.px 0/a-b", "drift.feature.px 0/a-b"),
], ids=["plain", "colon-replaced", "space-slash-dash-kept"])
def test_metric_keys_are_what_mlflow_accepts(name, key):
    assert conv.metric_key(name) == key


def test_promotion_records_of_one_instant_never_share_a_file():
    record = {"at": "2026-01-01T00:00:00.000+00:00", "model": "digits", "promoted": True}
    (first, data), (second, _) = conv.promotion_record(record), conv.promotion_record(record)
    assert first != second and first.startswith("2026-01-01T000000.000+0000-") and first.endswith(".json")
    assert data.endswith(b"\n") and json.loads(data) == record


@pytest.mark.parametrize(("run_date", "night"), [
    ("2026-12-01T02:00:00+00:00", 20788),
    ("2026-12-01T02:00:00", 20788),
    ("2026-12-01T23:30:00-05:00", 20789),
], ids=["utc", "naive-is-utc", "offset-counts-in-utc"])
def test_a_nightly_verdict_is_one_point_per_night(run_date, night):
    verdict = Verdict.from_checks("nightly-drift", [Check("ks_drift", passed=True, value=0.0)], subject=None,
                                  details={"model_version": "3", "run_date": run_date})
    assert conv.drift_night(verdict)[1] == night


def test_step_tags_carry_the_verdict_digest():
    verdict = Verdict.from_checks("export", [Check("a", passed=False, value=2.0)], subject=None)
    assert conv.step_tags(verdict)[conv.VERDICT_DIGEST_TAG] == verdict.digest()
    assert conv.step_metrics("export", verdict) == {"export.a": 2.0, "export.a.passed": 0.0}


def test_every_check_has_a_passed_metric_in_one_direction_and_its_figure_beside_it():
    """`lint.*` counts offending modules (0 = pass) and `determinism` had only a flag (0 = fail): read side by side
    in the runs table, 0 meant both. `.passed` is 1 for a pass, whatever the figure's direction."""
    verdict = Verdict.from_checks("export", [
        Check("lint.batchnorm_eval_mode", passed=True, value=0.0, limit=0.0),
        Check("determinism.torch", passed=False),
        Check("mmd_drift", passed=True, value=0.82, limit=0.05)], subject=None)
    assert conv.step_metrics("export", verdict) == {
        "export.lint.batchnorm_eval_mode": 0.0, "export.lint.batchnorm_eval_mode.passed": 1.0,
        "export.determinism.torch.passed": 0.0,
        "export.mmd_drift": 0.82, "export.mmd_drift.passed": 1.0}


def test_every_tag_name_is_spelled_in_one_module():
    """A `skewgate.…` string anywhere else is a tag name spelled twice (or a module path, which is fine)."""
    import ast
    import re
    from pathlib import Path

    import skewgate

    root = Path(skewgate.__file__).parent
    modules = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
               for p in root.rglob("*.py")}
    # attest.py names fields of the signed in-toto statement, the key files are files, and `skewgate.states` is a
    # Triton model-config parameter (read by the served model.py, which cannot import skewgate): none is a tag
    files = {"skewgate.key", "skewgate.pub", "skewgate.states"}
    spelled = []
    for path in root.rglob("*.py"):
        if path.name in ("mlflow_conventions.py", "attest.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"skewgate\.[\w.]+", node.value) and node.value not in modules | files:
                spelled.append(f"{path.relative_to(root)}:{node.lineno}: {node.value}")
    assert not spelled, "tag names outside common/mlflow_conventions.py:\n" + "\n".join(spelled)


def test_a_step_runs_description_says_why_it_failed_check_by_check():
    verdict = Verdict.from_checks("export", [
        Check("outputs_match.linear", passed=False, value=5.62, limit=3.6e-05, detail="ORT vs torch | max 5.62"),
        Check("lint.batchnorm_eval_mode", passed=False, detail="BatchNorm traced in training mode: features.1"),
        Check("determinism.torch", passed=True)], subject=None)
    text = conv.step_tags(verdict)[conv.NOTE_TAG]
    first, _, header, _, *rows = text.splitlines()
    assert first == f"**FAIL** — {escape(verdict.message)}"
    assert header == "| check | figure | detail |"
    assert rows == ["| outputs\\_match\\.linear | 5.62 (at most 3.6e-05) | ORT vs torch \\| max 5\\.62 |",
                    "| lint\\.batchnorm\\_eval\\_mode |  | BatchNorm traced in training mode: features\\.1 |"]
    passing = Verdict.from_checks("export", [Check("determinism.torch", passed=True)], subject=None)
    assert conv.step_tags(passing)[conv.NOTE_TAG] == f"**PASS** — {escape(passing.message)}"


def test_a_description_shows_what_a_model_named_as_text_never_as_markup():
    hostile = "[click](javascript:alert(1)) <img src=x onerror=alert(1)>\n| forged | row |"
    verdict = Verdict.from_checks("drift", [Check(hostile, passed=False, detail=hostile)], subject=None)
    text = conv.run_description(verdict)
    assert "](javascript" not in text and "<img" not in text and "\n| forged" not in text
    assert len(text.splitlines()) == 5  # outcome, blank, header, rule, one row: the name forged none
