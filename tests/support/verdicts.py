"""Each step's options at their defaults, and verdicts that say them as the steps do (`Verdict.judged_with`): for
the tests of what judges verdicts (the policy, promote, verify), whose default policy accepts exactly these."""

from skewgate.calibrate.core import CalibrateOptions
from skewgate.common.verdict import Verdict
from skewgate.compare.run import CompareOptions
from skewgate.drift.core import DriftOptions
from skewgate.estimate.core import EstimateOptions
from skewgate.export.run import ExportOptions
from skewgate.parity.core import ParityOptions
from skewgate.preprocess.run import PreprocessOptions
from skewgate.probe.run import ProbeOptions

DEFAULT_OPTIONS = {"export": ExportOptions(), "calibrate": CalibrateOptions(), "drift": DriftOptions(),
                   "parity": ParityOptions(), "probe": ProbeOptions(), "compare": CompareOptions(),
                   "preprocess": PreprocessOptions(), "estimate": EstimateOptions()}


def at_defaults(verdict: Verdict) -> Verdict:
    """`verdict`, saying it was judged with its step's defaults when it says no settings (a step always says
    them); a verdict that says its own, or of a step with no options here, is returned as it is."""
    if verdict.settings or verdict.step not in DEFAULT_OPTIONS:
        return verdict
    return verdict.judged_with(DEFAULT_OPTIONS[verdict.step])
