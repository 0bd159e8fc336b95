"""The KFP components' literal defaults (KFP needs literals in the signature) are the ones run.py and
`DriftOptions` document: a changed default cannot drift apart between the CLI and the pipelines."""

import inspect

import pytest

from skewgate.drift import component
from skewgate.drift.run import DEFAULT_ALIAS, DriftOptions


def _default(op, name):
    return inspect.signature(op.python_func).parameters[name].default


def test_release_gate_seed_is_the_options_default():
    assert _default(component.drift_op, "seed") == DriftOptions().seed


@pytest.mark.parametrize("op", [component.nightly_drift_op, component.nightly_drift_plan_op,
                                component.nightly_drift_merge_op], ids=lambda op: op.name)
def test_nightly_components_check_the_default_alias(op):
    assert _default(op, "alias") == DEFAULT_ALIAS
