"""`run`, the one entry of the CLI and the KFP component: the verdict, the files it writes, what it logs to the
step's run, and `CalibrateOptions` as the single source of defaults."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from skewgate.calibrate.core import CalibrateDetails, calibrate
from skewgate.calibrate.run import CalibrateOptions, publish, run
from skewgate.common.recording import TrackingOptions
from skewgate.common.verdict import Verdict
from tests.calibrate import models

# the JSON keys of `details` since before the typed record: consumers (promote, the reports) read these
DETAIL_KEYS = {"method", "samples", "memory_estimate_mib", "equalization", "excluded_nodes", "reduce_range", "trials",
               "judged", "judged_on", "accuracy", "logits", "outputs", "unfused_drop", "int8_coverage", "outliers",
               "int8"}


class FakeStepRun:
    """The two calls publishing makes on an MLflow step run, recorded."""

    def __init__(self) -> None:
        self.tables: dict[str, list] = {}
        self.artifacts: dict[str, bytes] = {}

    def log_table(self, artifact_file: str, rows: list) -> None:
        self.tables[artifact_file] = rows

    def log_artifact_as(self, path, name: str) -> None:
        self.artifacts[name] = Path(path).read_bytes()


@pytest.fixture
def tiny(tmp_path):
    rng = np.random.default_rng(2)
    np.savez(tmp_path / "calib.npz", x=rng.uniform(-1, 1, (64, 4)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=rng.uniform(-1, 1, (100, 4)).astype(np.float32))
    return {"onnx": models.tiny_mlp(tmp_path / "tiny.onnx"), "calibration": tmp_path / "calib.npz",
            "eval_data": tmp_path / "eval.npz", "out": tmp_path / "tiny.int8.onnx"}


def test_publishes_the_files_and_the_tables_under_their_names(tiny, tmp_path):
    step_run, options = FakeStepRun(), CalibrateOptions(max_accuracy_drop=1.0, min_top1_agreement=0.0)
    result = calibrate(**tiny, options=options)
    publish(result, step_run, plot=tmp_path / "h.png", html=tmp_path / "r.html", options=options)
    verdict = result.verdict
    assert verdict.status in ("pass", "warn") and tiny["out"].is_file()
    assert verdict.details["int8"]["path"] == str(tiny["out"])
    assert set(step_run.tables) == {"calibration_tensors.json", "calibration_trials.json", "calibration_layers.json"}
    assert step_run.tables["calibration_trials.json"] == list(verdict.details["trials"])
    assert set(step_run.artifacts) == {"calibration_histograms.png", "calibration_report.html"}  # KFP paths: no name
    assert step_run.artifacts["calibration_histograms.png"][:4] == b"\x89PNG"
    assert (tmp_path / "h.png").is_file() and "accuracy-budget trials" in (tmp_path / "r.html").read_text()


def test_without_tracking_or_outputs_it_only_judges(tiny):
    verdict = run(**tiny, options=CalibrateOptions(), tracking=TrackingOptions()).verdict
    assert verdict.details["method"] == CalibrateOptions().method
    assert verdict.check("accuracy_drop").limit == CalibrateOptions().max_accuracy_drop
    # what it was judged with: the options, but the names the pictures are logged under
    judged = {f.name for f in dataclasses.fields(CalibrateOptions)} - {"plot_name", "html_name"}
    assert set(verdict.settings) == judged


def test_details_are_typed_and_serialise_to_the_same_keys(tiny):
    verdict = run(**tiny, options=CalibrateOptions(), tracking=TrackingOptions()).verdict
    # non_finite_fp32 is left out while no tensor holds ±inf (tests/calibrate/test_core.py has one that does),
    # quantiser_refused while ORT's quantiser refuses none (tests/calibrate/int8/test_quantize.py)
    assert {f.name for f in dataclasses.fields(CalibrateDetails)} - {"non_finite_fp32", "quantiser_refused"} \
        == DETAIL_KEYS \
        == set(verdict.details)
    data = json.loads(verdict.to_json())["details"]
    assert set(data["accuracy"]) == {"fp32", "int8", "drop"} and set(data["unfused_drop"]) == {"first", "final"}
    assert set(data["int8"]) == {"path", "sha256"} and isinstance(data["excluded_nodes"], list)
    assert Verdict.from_dict(json.loads(verdict.to_json())).to_json() == verdict.to_json()


def test_the_cli_defaults_are_the_options_defaults():
    from skewgate.calibrate.cli import build_parser

    args = build_parser().parse_args(["--onnx", "m", "--calibration", "c", "--eval", "e", "--out", "o"])
    defaults = CalibrateOptions()
    assert (args.method, args.max_accuracy_drop, args.max_fallback_layers, args.batch_size,
            args.min_calibration_samples, args.min_int8_mac_share) == (
        defaults.method, defaults.max_accuracy_drop, defaults.max_fallback_layers, defaults.batch_size,
        defaults.min_calibration_samples, defaults.min_int8_mac_share)
    assert (not args.no_equalize, not args.per_tensor_weights) == (defaults.equalize, defaults.per_channel)


def test_the_cli_goes_through_run_with_its_flags_as_options(monkeypatch, tmp_path):
    from skewgate.calibrate import cli
    from skewgate.cli import main
    from skewgate.common.recording import StepResult
    from skewgate.common.verdict import Check

    calls = []

    def recording(**kwargs):
        calls.append(kwargs)
        return StepResult(Verdict.from_checks("calibrate", [Check("accuracy_drop", passed=True)], subject=None))

    monkeypatch.setattr(cli, "run", recording)
    assert main(["calibrate", "--onnx", "m.onnx", "--calibration", "c.npz", "--eval", "e.npz", "--out", "o.onnx",
                 "--max-accuracy-drop", "0.05", "--no-equalize", "--html", str(tmp_path / "r.html"),
                 "--tracking-uri", ""]) == 0
    [call] = calls
    # the files are logged under their own names
    assert call["options"] == CalibrateOptions(max_accuracy_drop=0.05, equalize=False, plot_name="", html_name="")
    assert call["html"] == tmp_path / "r.html" and str(call["onnx"]) == "m.onnx"
