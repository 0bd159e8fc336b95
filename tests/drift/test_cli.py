import json

import numpy as np
import pytest
from mlflow import MlflowClient

from skewgate.cli import main
from tests.drift.conftest import make_frame

N = 1500


@pytest.mark.parametrize(
    ("current", "code", "status"),
    [
        pytest.param({}, 0, "pass", id="pass-exits-0"),
        pytest.param({"corr": True}, 0, "warn", id="warn-exits-0"),
        pytest.param({"shift": 0.6}, 1, "fail", id="fail-exits-1"),
    ],
)
def test_exit_codes_and_outputs(write, tmp_path, current, code, status):
    ref, cur = write("ref", make_frame(N, seed=1)), write("cur", make_frame(N, seed=2, **current))
    args = ["drift", "--reference", str(ref), "--current", str(cur), "--report", str(tmp_path / "d.json"),
            "--heatmap", str(tmp_path / "h.png"), "--html", str(tmp_path / "r.html")]
    assert main(args) == code
    assert json.loads((tmp_path / "d.json").read_text())["status"] == status
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"drift: {status.upper()}" in (tmp_path / "r.html").read_text()


def test_bad_input_exits_2(write, tmp_path, capsys):
    ref = write("ref", make_frame(N, seed=1))
    cur = write("cur", make_frame(N, seed=2).drop(columns=["f0"]))
    assert main(["drift", "--reference", str(ref), "--current", str(cur)]) == 2
    assert "missing ['f0']" in capsys.readouterr().err


def test_profile_command_then_drift_against_the_profile(write, tmp_path):
    ref, cur = write("ref", make_frame(N, seed=1)), write("cur", make_frame(N, seed=2))
    assert main(["drift", "profile", "--reference", str(ref), "--out", str(tmp_path / "ref.profile")]) == 0
    assert main(["drift", "--reference", str(tmp_path / "ref.profile"), "--current", str(cur), "--report",
                 str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["details"]["reference_from_profile"] is True
    assert main(["drift", "profile", "--reference", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "x")]) == 2


def test_logs_metrics_feature_table_and_heatmap_to_mlflow(mlflow_db, write, tmp_path):
    uri = mlflow_db
    ref, cur = write("ref", make_frame(N, seed=1)), write("cur", make_frame(N, seed=2, shift=0.6))
    assert main(["drift", "--reference", str(ref), "--current", str(cur), "--heatmap", str(tmp_path / "h.png"),
                 "--tracking-uri", uri, "--experiment", "drift"]) == 1
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("drift").experiment_id],
                             "tags.`skewgate.step` = 'drift'")[0]
    assert run.data.metrics["drift.ks_drift"] == 1.0
    assert {"drift.verdict.json", "features.json", "h.png"} <= {a.path for a in client.list_artifacts(run.info.run_id)}


def test_feature_names_with_dollars_and_markup_are_text_in_the_pictures_and_the_page(write, tmp_path):
    hostile = {"f0": "price $USD", "f1": "$\\notacommand{x}$", "f2": "<img src=x onerror=alert(1)>"}
    ref = write("ref", make_frame(N, seed=1).rename(columns=hostile))
    cur = write("cur", make_frame(N, seed=2, shift=0.6).rename(columns=hostile))
    args = ["drift", "--reference", str(ref), "--current", str(cur), "--report", str(tmp_path / "d.json"),
            "--heatmap", str(tmp_path / "h.png"), "--html", str(tmp_path / "r.html")]
    assert main(args) == 1  # still a failed gate: the names did not turn it into "could not evaluate"
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "r.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_the_gate_needs_reference_and_current(write, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["drift", "--current", str(write("cur", make_frame(10, seed=2)))])
    assert exit_.value.code == 2
    assert "required: --reference" in capsys.readouterr().err


def test_flag_defaults_are_the_documented_options():
    from skewgate.drift.cli import build_parser
    from skewgate.drift.core import DriftOptions

    args = build_parser().parse_args(["--reference", "r", "--current", "c"])
    defaults = DriftOptions()
    assert (args.alpha_ks, args.alpha_mmd, args.correction, args.min_effect, args.permutations, args.seed) == (
        defaults.alpha_ks, defaults.alpha_mmd, defaults.correction, defaults.min_effect, defaults.permutations,
        defaults.seed)
    assert build_parser().parse_args(["profile", "--reference", "r", "--out", "o"]).sketch == defaults.sketch


def _csv(path, text):
    path.write_text(text)
    return path


def test_csv_read_as_int64_on_one_side_and_float64_on_the_other_is_compared_as_float64(tmp_path, capsys):
    rng = np.random.default_rng(0)
    ints = rng.integers(0, 5, 400)
    floats = rng.integers(0, 5, 400) + 0.5 * (rng.random(400) < 0.01)
    ref = _csv(tmp_path / "ref.csv", "a,b\n" + "".join(f"{v},{w}\n" for v, w in zip(ints, ints, strict=True)))
    cur = _csv(tmp_path / "cur.csv", "a,b\n" + "".join(f"{v},{w}\n" for v, w in zip(floats, ints, strict=True)))
    assert main(["drift", "--reference", str(ref), "--current", str(cur), "--report", str(tmp_path / "d.json")]) == 0
    assert json.loads((tmp_path / "d.json").read_text())["status"] in ("pass", "warn")
    assert "ERROR" not in capsys.readouterr().err


def test_csv_files_of_one_data_set_read_as_int64_and_float64_are_read_as_float64(tmp_path):
    (tmp_path / "ref").mkdir()
    _csv(tmp_path / "ref" / "1.csv", "a\n" + "".join(f"{i % 5}\n" for i in range(300)))
    _csv(tmp_path / "ref" / "2.csv", "a\n" + "".join(f"{i % 5 + 0.5}\n" for i in range(300)))
    cur = _csv(tmp_path / "cur.csv", "a\n" + "".join(f"{i % 5}\n" for i in range(300)))
    assert main(["drift", "--reference", str(tmp_path / "ref" / "*.csv"), "--current", str(cur), "--report",
                 str(tmp_path / "d.json")]) in (0, 1)  # judged (the 0.5 shift may drift), not refused
    assert json.loads((tmp_path / "d.json").read_text())["status"] in ("pass", "warn", "fail")


def test_csv_column_of_numbers_on_one_side_and_text_on_the_other_exits_2_naming_both(tmp_path, capsys):
    ref = _csv(tmp_path / "ref.csv", "a,b\n" + "1,2\n" * 50)
    cur = _csv(tmp_path / "cur.csv", "a,b\n" + "x,2\n" * 50)
    assert main(["drift", "--reference", str(ref), "--current", str(cur)]) == 2
    err = capsys.readouterr().err
    assert "cur.csv: a: expected dtype float64 (as in the reference), found dtype object" in err


def test_csv_files_of_one_data_set_with_numbers_and_text_in_one_column_exit_2_naming_both(tmp_path, capsys):
    (tmp_path / "ref").mkdir()
    _csv(tmp_path / "ref" / "1.csv", "a,b\n" + "1,2\n" * 50)
    _csv(tmp_path / "ref" / "2.csv", "a,b\n" + "x,2\n" * 50)
    cur = _csv(tmp_path / "cur.csv", "a,b\n" + "1,2\n" * 50)
    assert main(["drift", "--reference", str(tmp_path / "ref" / "*.csv"), "--current", str(cur)]) == 2
    err = capsys.readouterr().err
    assert "2.csv: a: expected type int64, as in " in err and "1.csv, found type string" in err
    assert "Traceback" not in err
