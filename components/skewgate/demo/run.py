"""`skewgate demo`: train the digits CNN, gate a good, a defective and a weak candidate through the release-gate
pipeline (export, drift, layerwise parity, a real Triton server probed, comparison with the champion, promote;
the good one's gate also estimates its accuracy, so the champion carries an estimate profile) on kfp.local
against an embedded MLflow store, then run the nightly drift check and accuracy estimate twice — on healthy
serving data and on data from a serving path that forgot to scale the pixels — and show what happened."""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from skewgate.common.cli_support import configure_logging, describe

log = logging.getLogger("skewgate.demo")
MODEL_NAME = "digits-cnn"


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="skewgate demo")
    describe(parser, __doc__, example="""
        skewgate demo --workdir work/demo
        mlflow ui --backend-store-uri sqlite:///work/demo/mlflow.db
    """)
    parser.add_argument("--workdir", type=Path, default=Path("work/demo"), help="default: work/demo")
    parser.add_argument("--tracking-uri", default="",
                        help="MLflow URI (default: sqlite:///WORKDIR/mlflow.db, the embedded store)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training and the data (default: 0)")
    return parser


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = build_parser(parser).parse_args(argv)
    configure_logging()
    workdir: Path = args.workdir.resolve()
    tracking_uri = args.tracking_uri or f"sqlite:///{workdir / 'mlflow.db'}"

    from skewgate.common import mlflow_log
    from skewgate.common.errors import SkewgateError
    from skewgate.common.triton.server import Installation, triton_home
    from skewgate.demo.digits import train_and_save
    from skewgate.pipelines.local import run_locally, verdict_table
    from skewgate.pipelines.nightly_drift import build_nightly_drift
    from skewgate.pipelines.release_gate import release_gate

    try:  # the probe step needs a real tritonserver: say so now, not after training and two pipeline runs
        Installation(triton_home()).check()
    except SkewgateError as err:
        print(f"demo: {err}", file=sys.stderr)
        return 2
    log.info("training the digits CNN (seed %d)", args.seed)
    data = train_and_save(workdir / "candidates", seed=args.seed)
    log.info("test accuracy in PyTorch: %.1f%% (weak candidate: %.1f%%)", 100 * data.accuracy,
             100 * data.weak_accuracy)
    if not args.tracking_uri:  # the embedded store is the demo's own; a store given must exist (no step makes one)
        # a fresh one each run, and the pipeline runs of this run only: a previous run's champion and drifted nights
        # would change what this run shows (the nightly series remembers an alarm: a healthy night after two
        # demos' drifted ones fails)
        for previous in (workdir / "mlflow.db", workdir / "artifacts", workdir / "kfp"):
            if previous.is_dir():
                shutil.rmtree(previous)
            elif previous.exists():
                previous.unlink()
        mlflow_log.create_store(tracking_uri)
    tracking = mlflow_log.connect(tracking_uri, experiment=MODEL_NAME)
    public_key = _signing_keys(workdir / "keys")
    statuses = {}
    runs = [(f"release gate, {label} candidate ({candidate.name})", release_gate,
             {"candidate_model": str(candidate), "eval_data": str(data.examples),
              "calibration_data": str(data.calibration), "reference_data": str(data.reference),
              "current_data": str(data.current), "model_name": MODEL_NAME, "mlflow_tracking_uri": tracking_uri,
              "trusted_public_keys": public_key, "estimate_accuracy": label == "good"})
            for label, candidate in (("good", data.good), ("defective", data.defective), ("weak", data.weak))]
    # two successive nights, as the schedule would date them: the drift history then charts two points, not
    # two values on one night
    today = datetime.now(UTC).replace(hour=2, minute=0, second=0, microsecond=0)
    runs += [(f"nightly drift, {label} serving data",
              build_nightly_drift(run_date=night.isoformat(timespec="seconds"), mlflow_secret_name=""),
              {"serving_snapshot": str(snapshot), "model_name": MODEL_NAME, "mlflow_tracking_uri": tracking_uri,
               "estimate_accuracy": True})
             for label, snapshot, night in (("healthy", data.current, today - timedelta(days=1)),
                                            ("unscaled-pixels", data.serving_bug, today))]
    for title, pipeline, arguments in runs:
        log.info("running the %s", title)
        run = run_locally(pipeline, arguments, pipeline_root=workdir / "kfp", log_file=workdir / "kfp.log")
        _parent, verdicts = tracking.pipeline_verdicts(since_ms=run.started_ms)
        statuses[title] = {step: v.status for step, v in verdicts.items()}
        print(f"\n== {title}: run {'succeeded' if run.succeeded else 'FAILED (blocked)'} ==")
        print(verdict_table(verdicts))

    champion = mlflow_log.alias_version(tracking, MODEL_NAME, "champion")
    print(f"\n'champion' alias of {MODEL_NAME}: version {champion or '(none)'}")
    skewgate_bin = Path(sys.executable).with_name("skewgate")
    print(f"Verify it as a deployment would: {skewgate_bin} verify --model-name {MODEL_NAME} --alias champion "
          f"--trusted-key {workdir / 'keys' / 'skewgate.pub'} --tracking-uri {tracking_uri}")
    print(f"Task logs of the pipeline runs: {workdir / 'kfp.log'}")
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    print(f"Open the results: {mlflow_bin} ui --backend-store-uri {tracking_uri} --port 5000  "
          f"(then {mlflow_log.runs_table_link('http://127.0.0.1:5000', tracking.experiment_id)})")
    # the weak candidate is a faithful export of a worse model: only compare (against the good one) blocks it
    expected = [{"export": "pass", "calibrate": "pass", "drift": "pass", "parity": "pass", "probe": "pass",
                 "compare": "pass", "estimate": "pass", "promote": "pass"},
                {"export": "fail", "calibrate": "pass", "drift": "pass", "parity": "fail", "probe": "pass",
                 "compare": "pass", "promote": "fail"},
                {"export": "pass", "calibrate": "pass", "drift": "pass", "parity": "pass", "probe": "pass",
                 "compare": "fail", "promote": "fail"},
                {"nightly-drift": "pass", "nightly-estimate": "pass"},
                {"nightly-drift": "fail", "nightly-estimate": "fail"}]
    if list(statuses.values()) != expected:
        print(f"demo: expected {expected}, got {list(statuses.values())}", file=sys.stderr)
        return 1
    return 0


def _signing_keys(folder: Path) -> str:
    """The demo's own key pair (made once): every step signs its verdict with the private key (through
    `$SKEWGATE_SIGNING_KEY`, which kfp.local hands to the steps), and promote trusts only the public key."""
    import os

    from skewgate.common import attest

    if not (folder / attest.KEY_FILE).exists():
        attest.generate_keys(folder)
    os.environ[attest.SIGNING_KEY_ENV] = str(folder / attest.KEY_FILE)
    return (folder / attest.PUBLIC_KEY_FILE).read_text(encoding="utf-8")
