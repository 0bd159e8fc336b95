"""What `skewgate pipeline run --local` (and the demo) print after a run: each step's verdict from the run's own
outputs, one line a step, the deciding check first (#36 item 3: it printed 1,500 lines and "FAILED (output:
None)", the reason 100 lines up)."""

import os
import time

from skewgate.common.verdict import Check, Subject, Verdict
from skewgate.pipelines.local import run_verdicts, verdict_table

SUBJECT = Subject(artifact="model.onnx", sha256="0" * 64)


def _task(run, task, verdict):
    (run / task).mkdir(parents=True)
    verdict.write(run / task / "verdict")


def test_the_verdicts_come_from_the_run_that_started_then_not_an_earlier_one(tmp_path):
    earlier = tmp_path / "skewgate-nightly-drift-earlier"
    _task(earlier, "nightly-drift-op", Verdict.from_checks("nightly-drift", [Check("a", passed=True)],
                                                           subject=SUBJECT))
    old = time.time() - 3600
    os.utime(earlier, (old, old))
    started_ms = int(time.time() * 1000)
    latest = tmp_path / "skewgate-nightly-drift-latest"
    failing = Verdict.from_checks("nightly-drift", [
        Check("joint_drift", passed=False, severity="warn", detail="both KS and MMD detect drift"),
        Check("series.anytime_valid", passed=False, detail="running e-value 8.3e+4 (alarm at 25)")],
        subject=SUBJECT)
    _task(latest, "nightly-drift-op", failing)
    (latest / "finish-run-op").mkdir()  # a task without a verdict output
    (tmp_path / "kfp.log").write_text("…")
    verdicts = run_verdicts(tmp_path, started_ms)
    assert list(verdicts) == ["nightly-drift"] and verdicts["nightly-drift"].status == "fail"
    table = verdict_table(verdicts).splitlines()
    assert table[0].split() == ["step", "status", "why"]
    # the check that failed the run leads; the warning follows
    assert table[1].split(None, 2)[2] == ("series.anytime_valid: running e-value 8.3e+4 (alarm at 25); "
                                          "joint_drift: both KS and MMD detect drift")


def test_steps_are_listed_in_the_pipelines_order(tmp_path):
    verdicts = {step: Verdict.from_checks(step, [Check("c", passed=True)], subject=SUBJECT)
                for step in ("promote", "estimate", "parity", "export")}
    assert [line.split()[0] for line in verdict_table(verdicts).splitlines()[1:]] == [
        "export", "parity", "estimate", "promote"]
    # a night's two tasks finish in either order; the table (and the README's copy of the demo) does not change
    night = {step: Verdict.from_checks(step, [Check("c", passed=True)], subject=SUBJECT)
             for step in ("nightly-estimate", "nightly-drift")}
    assert [line.split()[0] for line in verdict_table(night).splitlines()[1:]] == ["nightly-drift", "nightly-estimate"]
    assert verdict_table({}) == "  (no verdicts recorded)"
    assert run_verdicts(tmp_path, int(time.time() * 1000)) == {}
