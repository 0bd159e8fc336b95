"""The one plumbing op: it compiles, and it fails the run naming what blocked it."""

import pytest
from kfp import compiler

from skewgate.common.verdict import Check, Verdict
from skewgate.pipelines.plumbing import blocked


def test_compiles(tmp_path):
    compiler.Compiler().compile(blocked, str(tmp_path / "blocked.yaml"))
    assert "blocked" in (tmp_path / "blocked.yaml").read_text()


@pytest.mark.parametrize(("step", "said"), [("promote", "promotion refused: "),
                                            ("nightly-drift", "drift detected: ")], ids=["release", "nightly"])
def test_fails_the_run_naming_the_refusal(tmp_path, step, said):
    from types import SimpleNamespace

    refusal = Verdict.from_checks(step, [Check("evidence.export", passed=False, detail="unsigned")], subject=None)
    path = refusal.write(tmp_path / "verdict.json")
    with pytest.raises(RuntimeError, match=f"^{said}"):
        blocked.python_func(verdict=SimpleNamespace(path=str(path)))
