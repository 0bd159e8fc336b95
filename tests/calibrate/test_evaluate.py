"""The verdict's figures from final outputs: which outputs are scored how."""

import numpy as np
import pytest

from skewgate.calibrate.int8.evaluate import Reference, agreement, compare


def test_probabilities_are_compared_as_they_are():
    p = np.array([[0.98, 0.01, 0.01], [0.2, 0.7, 0.1]])
    q = np.array([[0.90, 0.05, 0.05], [0.2, 0.7, 0.1]])
    as_probabilities = agreement(p, q, probabilities=True)
    expected = np.mean([np.sum(p[0] * np.log(p[0] / q[0])), 0.0])
    assert as_probabilities["kl_divergence"] == pytest.approx(expected, rel=1e-6)
    # a second softmax over probabilities flattens them and understates the damage
    assert agreement(p, q, probabilities=False)["kl_divergence"] < as_probabilities["kl_divergence"] / 10
    assert as_probabilities["top1_agreement"] == 1.0


def test_labels_score_the_first_classifier_output_and_disagreement_takes_the_worst():
    logits = np.array([[3.0, 0.0], [0.0, 3.0], [3.0, 0.0], [0.0, 3.0]])
    other = np.array([[1.0, 0.0, 0.0]] * 4)
    regression = np.ones((4, 1))
    ref = Reference(["reg", "a", "b"], [regression, logits, other], frozenset(), None, None)
    flipped = logits.copy()
    flipped[0] = [0.0, 3.0]
    other_flipped = other.copy()
    other_flipped[:2] = [0.0, 1.0, 0.0]
    result = compare(ref, {"reg": regression * 1.1, "a": flipped, "b": other_flipped})
    assert ref.classifiers == ["a", "b"]
    assert result.drop == 0.5  # output b: 2 of 4 disagree
    assert result.logits["top1_agreement"] == 0.75  # the first classifier output's figures
    assert result.outputs["reg"]["sqnr_db"] == pytest.approx(20.0)  # reported, not gated
    labelled = Reference(ref.names, ref.outputs, frozenset(), np.array([0, 1, 0, 1]), "a")
    scored = compare(labelled, {"reg": regression, "a": flipped, "b": other_flipped})
    assert (scored.accuracy_fp32, scored.accuracy_int8, scored.drop) == (1.0, 0.75, 0.25)


def test_no_classifier_output_scores_nothing():
    ref = Reference(["reg"], [np.ones((4, 1))], frozenset(), None, None)
    result = compare(ref, {"reg": np.ones((4, 1))})
    assert result.logits == {} and result.drop == 0.0 and result.accuracy_fp32 is None
