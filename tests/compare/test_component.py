"""compare_op's parameters as options (tests/test_step_contract.py holds their defaults to `CompareOptions`'s):
bad ones are bad input when judging starts."""

import pytest

from skewgate.common.errors import InputError
from skewgate.compare.run import options_from_parameters


@pytest.mark.parametrize(("task", "thresholds", "message"), [
    pytest.param("ranking", "", "one of", id="unknown-task"),
    pytest.param("auto", "accuracy:floor=high", "a number or `none`", id="bad-threshold"),
])
def test_bad_parameters_are_bad_input_when_judging_starts(task, thresholds, message):
    options = options_from_parameters(alias="champion", task=task, thresholds=thresholds, confidence=0.95,
                                      max_churn="")
    with pytest.raises(InputError, match=message):
        options.judging()


@pytest.mark.parametrize(("text", "gated"), [
    pytest.param("", None, id="blank-is-not-gated"),
    pytest.param("  ", None, id="spaces-are-not-gated"),
    pytest.param("0", 0.0, id="zero-gates-every-change"),
    pytest.param("0.05", 0.05, id="a-share"),
    pytest.param("1", 1.0, id="one-is-a-limit-too"),
])
def test_max_churn_is_a_share_or_blank(text, gated):
    options = options_from_parameters(alias="champion", task="auto", thresholds="", confidence=0.95,
                                      max_churn=text)
    assert options.max_churn == gated and options.judging().max_churn == gated


def test_max_churn_that_is_no_number_names_the_parameter():
    with pytest.raises(InputError, match=r"max_churn.*a share in \[0, 1\].*'five percent'"):
        options_from_parameters(alias="champion", task="auto", thresholds="", confidence=0.95,
                                max_churn="five percent")


@pytest.mark.parametrize("text", [pytest.param("-0.01", id="just-below-0"), pytest.param("1.01", id="just-above-1"),
                                  pytest.param("nan", id="nan"), pytest.param("inf", id="inf")])
def test_max_churn_outside_0_1_is_bad_input_when_judging_starts(text):
    options = options_from_parameters(alias="champion", task="auto", thresholds="", confidence=0.95,
                                      max_churn=text)
    with pytest.raises(InputError, match=r"max_churn.*a share in \[0, 1\]"):
        options.judging()
