"""What the budget loop may keep in FP32, in the order the evidence points at: graphs built with onnx.helper (only
their structure is read), layerwise rows as `evaluate.layerwise` writes them."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from skewgate.calibrate.int8.fallback import Candidate, candidates

SEVEN_BIT = ("7-bit weights", (), True)
ATTENTION_WHY = "activation × activation, fused into QLinearMatMul when deployed"


def model(nodes, outputs, *, initializers=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        initializer=[numpy_helper.from_array(np.ones((4, 4), np.float32), name=i) for i in initializers])
    return helper.make_model(graph)


def node(op, inputs, output, name):
    return helper.make_node(op, inputs, [output], name=name)


def attention_block():
    """Projections (weights: initializers), scores and context (activation × activation), a Softmax between,
    a MatMul against a Constant node's output, and a Gemm head."""
    return model([
        node("MatMul", ["x", "Wq"], "q", "q_proj"),
        node("MatMul", ["x", "Wk"], "k", "k_proj"),
        node("Transpose", ["k"], "kt", "k_t"),
        node("MatMul", ["q", "kt"], "s", "scores"),
        node("Softmax", ["s"], "p", "softmax"),
        node("MatMul", ["p", "q"], "c", "context"),
        helper.make_node("Constant", [], ["C"], name="const",
                         value=numpy_helper.from_array(np.ones((4, 4), np.float32))),
        node("MatMul", ["c", "C"], "d", "const_mm"),
        node("Gemm", ["d", "Wh"], "y", "head"),
    ], ["y"], initializers=["Wq", "Wk", "Wh"])


QUANTIZABLE = {"q_proj": "MatMul", "k_proj": "MatMul", "k_t": "Transpose", "scores": "MatMul",
               "softmax": "Softmax", "context": "MatMul", "const_mm": "MatMul", "head": "Gemm"}


def layer(node_name, db, nodes=None):
    return {"node": node_name, "introduced_db": db, "nodes": nodes or [node_name]}


def shape(found):
    return [(c.label, c.nodes, c.reduce_range) for c in found]


ROWS = [layer("k_proj", -2.0), layer("q_proj", -7.5), layer("k_t", 0.5)]


def test_when_the_fused_kernels_add_error_7_bit_weights_then_fused_suspects_come_first():
    found = candidates(attention_block(), ROWS, QUANTIZABLE, fused_gap=0.03)
    assert shape(found) == [
        SEVEN_BIT,
        ("Softmax", ("softmax",), False),
        ("attention MatMuls", ("scores", "context"), False),
        ("q_proj", ("q_proj",), False),  # most error introduced first
        ("k_proj", ("k_proj",), False),
        ("output head", ("head",), False),
    ]
    assert found[0].why == "the deployed drop exceeds the unfused graph's by 0.0300: integer kernels saturating"
    assert found[1].why == "fused into QLinearSoftmax when deployed"
    assert found[2].why == ATTENTION_WHY
    assert found[-1].why == "last MatMul/Gemm before an output"


@pytest.mark.parametrize("fused_gap", [
    pytest.param(0.0, id="no-gap"),
    pytest.param(-0.02, id="unfused-worse"),
])
def test_otherwise_the_ranked_nodes_come_first_and_no_7_bit_trial(fused_gap):
    found = candidates(attention_block(), ROWS, QUANTIZABLE, fused_gap=fused_gap)
    assert shape(found) == [
        ("q_proj", ("q_proj",), False),
        ("k_proj", ("k_proj",), False),
        ("Softmax", ("softmax",), False),
        ("attention MatMuls", ("scores", "context"), False),
        ("output head", ("head",), False),
    ]
    assert not any(c.reduce_range for c in found)


def test_a_tiny_positive_gap_is_enough_for_the_7_bit_trial():
    found = candidates(attention_block(), [], QUANTIZABLE, fused_gap=1e-9)
    assert shape(found)[0] == SEVEN_BIT
    assert "by 0.0000:" in found[0].why


def test_matmuls_reading_a_weight_or_a_constant_are_not_attention():
    found = candidates(attention_block(), [], QUANTIZABLE, fused_gap=0.0)
    [attention] = [c for c in found if c.label == "attention MatMuls"]
    assert attention.nodes == ("scores", "context")  # not q_proj/k_proj (initializers), not const_mm (Constant)


def test_only_nodes_the_quantiser_handles_are_offered():
    quantizable = {"q_proj": "MatMul", "scores": "MatMul", "head": "Gemm"}  # no Softmax, context not quantised
    rows = [layer("k_proj", -9.0), layer("q_proj", -1.0)]  # k_proj loses most, but stays FP32 anyway
    found = candidates(attention_block(), rows, quantizable, fused_gap=0.0)
    assert shape(found) == [("q_proj", ("q_proj",), False), ("attention MatMuls", ("scores",), False),
                            ("output head", ("head",), False)]


def test_a_node_already_offered_is_not_offered_again_and_an_emptied_group_is_dropped():
    rows = [layer("head", -12.0), layer("scores", -4.0), layer("context", -3.0)]
    found = candidates(attention_block(), rows, QUANTIZABLE, fused_gap=0.0)
    # ranked first: head, scores, context; the attention group then has nothing new, nor has the output head
    assert shape(found) == [("head", ("head",), False), ("scores", ("scores",), False),
                            ("context", ("context",), False), ("Softmax", ("softmax",), False)]


def test_a_group_keeps_only_its_nodes_not_offered_before():
    rows = [layer("context", -5.0)]
    found = candidates(attention_block(), rows, QUANTIZABLE, fused_gap=0.0)
    assert shape(found)[:3] == [("context", ("context",), False), ("Softmax", ("softmax",), False),
                                ("attention MatMuls", ("scores",), False)]
    assert found[2].why == ATTENTION_WHY


def test_the_7_bit_trial_stays_though_it_keeps_no_node():
    found = candidates(model([node("Relu", ["x"], "y", "relu")], ["y"]), [], {}, fused_gap=0.5)
    assert shape(found) == [SEVEN_BIT]


def test_nothing_to_offer_is_an_empty_list():
    assert candidates(model([node("Relu", ["x"], "y", "relu")], ["y"]), [], {}, fused_gap=0.0) == []


def test_a_layer_folded_into_a_value_offers_its_weighted_node():
    """The quantiser fuses Conv + Relu: the compared value is the Relu's, the node kept in FP32 the Conv."""
    graph = model([node("Conv", ["x", "W"], "a", "conv"), node("Relu", ["a"], "y", "relu")], ["y"],
                  initializers=["W"])
    rows = [layer("relu", -6.0, nodes=["relu", "conv"])]
    [found] = candidates(graph, rows, {"conv": "Conv", "relu": "Relu"}, fused_gap=0.0)
    assert (found.label, found.nodes) == ("conv", ("conv",))
    assert found.why == "adds error in the layerwise view"  # no row of its own to give a figure


def test_the_ranked_nodes_why_gives_the_db_of_their_row():
    [found, *_] = candidates(attention_block(), [layer("q_proj", -7.54)], QUANTIZABLE, fused_gap=0.0)
    assert found.label == "q_proj" and "7.5 dB in the layerwise view" in found.why


def test_the_ranked_nodes_why_says_how_many_db_were_lost():
    [found, *_] = candidates(attention_block(), [layer("q_proj", -7.54)], QUANTIZABLE, fused_gap=0.0)
    assert found.why == "loses 7.5 dB in the layerwise view"


def test_rows_that_add_no_error_are_not_offered():
    rows = [layer("q_proj", 0.0), layer("k_proj", 3.0), layer("context", None)]
    found = candidates(attention_block(), rows, QUANTIZABLE, fused_gap=0.0)
    assert [c.label for c in found] == ["Softmax", "attention MatMuls", "output head"]


# --- the output head ---


def head_of(nodes, outputs, quantizable, initializers=("W", "W2")):
    found = candidates(model(nodes, outputs, initializers=initializers), [], quantizable, fused_gap=0.0)
    heads = [c for c in found if c.label == "output head"]
    return heads[0].nodes if heads else None


def test_the_head_is_the_nearest_matmul_or_gemm_upstream_of_the_output():
    nodes = [node("MatMul", ["x", "W"], "a", "body"), node("Relu", ["a"], "b", "relu"),
             node("Gemm", ["b", "W2"], "c", "fc"), node("Add", ["c", "b"], "d", "bias"),
             node("Softmax", ["d"], "y", "probs")]
    assert head_of(nodes, ["y"], {"body": "MatMul", "fc": "Gemm", "bias": "Add"}) == ("fc",)


def test_each_outputs_head_once_in_output_order():
    nodes = [node("MatMul", ["x", "W"], "a", "shared"), node("Relu", ["a"], "y1", "r1"),
             node("Sigmoid", ["a"], "y2", "s2"), node("MatMul", ["x", "W2"], "y3", "other")]
    quantizable = {"shared": "MatMul", "other": "MatMul"}
    assert head_of(nodes, ["y3", "y1", "y2"], quantizable) == ("other", "shared")


def test_a_head_the_quantiser_does_not_handle_is_not_offered():
    nodes = [node("MatMul", ["x", "W"], "y", "fc")]
    assert head_of(nodes, ["y"], {}) is None


def test_an_output_without_a_matmul_upstream_has_no_head():
    nodes = [node("Relu", ["x"], "a", "relu"), node("Add", ["a", "x"], "y", "add")]
    assert head_of(nodes, ["y"], {"relu": "Relu", "add": "Add"}) is None


def test_the_search_ends_on_a_graph_input_output():
    assert head_of([node("Relu", ["x"], "a", "relu")], ["x", "a"], {"relu": "Relu"}) is None


def test_the_search_reaches_past_branches_breadth_first():
    """The MatMul two nodes up one branch is nearer than the one three up the other."""
    nodes = [node("MatMul", ["x", "W"], "far", "far_mm"), node("Relu", ["far"], "f1", "r1"),
             node("Relu", ["f1"], "f2", "r2"), node("MatMul", ["x", "W2"], "near", "near_mm"),
             node("Relu", ["near"], "n1", "r3"), node("Add", ["f2", "n1"], "y", "add")]
    assert head_of(nodes, ["y"], {"far_mm": "MatMul", "near_mm": "MatMul"}) == ("near_mm",)


def test_unnamed_nodes_on_the_way_do_not_hide_the_head():
    nodes = [node("MatMul", ["x", "W"], "a", "fc"), node("Relu", ["a"], "b", ""), node("Add", ["b", "b"], "y", "")]
    assert head_of(nodes, ["y"], {"fc": "MatMul"}) == ("fc",)


def test_candidates_are_hashable_values():
    """The budget loop keys its probes by candidate."""
    a = Candidate("x", ("n",), "why")
    assert {a: 1}[Candidate("x", ("n",), "why")] == 1
    assert Candidate("x", ("n",), "why") != Candidate("x", ("n",), "why", reduce_range=True)
    with pytest.raises(AttributeError):
        a.nodes = ()
