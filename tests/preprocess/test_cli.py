import json

import numpy as np
import pytest

from skewgate.cli import main

M = "tests.preprocess.preprocessing_fns"


@pytest.mark.parametrize(
    ("serve", "code", "failed"),
    [
        pytest.param("serve_same", 0, set(), id="same-preprocessing"),
        pytest.param("serve_unscaled", 1, {"preprocess_match"}, id="serving-forgot-to-scale"),
        pytest.param("serve_augmented", 1, {"determinism.serve", "preprocess_match"}, id="augmentation-left-on"),
    ],
)
def test_preprocess_parity(tmp_path, serve, code, failed):
    np.savez(tmp_path / "raw.npz", images=np.random.default_rng(0).integers(0, 17, (20, 1, 8, 8)).astype(np.float64))
    args = ["preprocess", "--train", f"{M}:train", "--serve", f"{M}:{serve}", "--raw",
            str(tmp_path / "raw.npz"), "--report", str(tmp_path / "r.json")]
    assert main(args) == code
    report = json.loads((tmp_path / "r.json").read_text())
    assert {c["name"] for c in report["checks"] if not c["passed"]} == failed
    assert set(report["details"]["hash_chain"]) == {"raw", "train", "serve"}
    if serve == "serve_unscaled":
        detail = next(c["detail"] for c in report["checks"] if c["name"] == "preprocess_match")
        assert "first difference at" in detail
        assert len(report["details"]["channels"]["train"]["mean"]) == 1


def test_preprocess_with_an_unimportable_callable_exits_2(tmp_path):
    np.savez(tmp_path / "raw.npz", images=np.zeros((2, 3)))
    assert main(["preprocess", "--train", "nope.module:fn", "--serve", f"{M}:serve_same", "--raw",
                 str(tmp_path / "raw.npz")]) == 2


def test_the_old_spelling_parity_preprocess_still_works_and_says_so(tmp_path, capsys):
    np.savez(tmp_path / "raw.npz", images=np.arange(12.0).reshape(3, 4))
    code = main(["parity", "preprocess", "--train", f"{M}:train", "--serve", f"{M}:serve_unscaled", "--raw",
                 str(tmp_path / "raw.npz")])
    assert code == 1
    assert "skewgate preprocess" in capsys.readouterr().err
