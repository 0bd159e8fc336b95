"""Provenance matching on a real dynamo export: values pair by op and inputs (never by name), a rewritten op pairs
by its consumer, and what has no twin on either side is said with the reason."""

import contextlib
import io

import pytest
import torch
from torch import nn

from skewgate.common.layers import TorchRecorder
from skewgate.parity.internals.matching import match


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)  # eval mode: lowered as _native_batch_norm_legit_no_training
        self.head = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.conv(x)))
        return self.head(h.flatten(1))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 1, 8, 8)
    program = torch.export.export(model, (x,))
    with contextlib.redirect_stdout(io.StringIO()):
        onnx_program = torch.onnx.export(program, (x,), dynamo=True, verbose=False)
    return onnx_program.model_proto, program


def test_every_recorded_layer_pairs_with_its_program_node_by_op_not_name(exported):
    model, program = exported
    recorder = TorchRecorder(program)
    found = match(model, program, recorder.recorded)
    assert found.pairs, "nothing paired"
    targets = {node.name: str(node.target) for node in program.graph.nodes}
    how = {targets[node]: found.how[value] for value, node in found.pairs.items()}
    assert how["aten.relu.default"] == how["aten.linear.default"] == "same op and inputs"
    # rewritten ops (flatten lowered as a view, BatchNorm as its no-training kernel) pair by their consumer
    assert how["aten.flatten.using_ints"] == how["aten.batch_norm.default"] == "same consumer"
    # every op of the program is paired or listed as removed (here the convolution, folded into the BatchNorm)
    ops = {node.name for node in program.graph.nodes if node.op == "call_function"}
    assert ops == set(found.pairs.values()) | set(found.removed)
    assert set(found.how.values()) <= {"same op and inputs", "same consumer"}
    # one program node has at most one ONNX twin, and nothing is both paired and unmatched
    assert len(set(found.pairs.values())) == len(found.pairs)
    assert not set(found.pairs) & set(found.unmatched)
    assert all(reason for reason in found.unmatched.values())
    assert all(found.lowering[value] for value in found.pairs)


def test_renamed_onnx_values_still_pair_the_same_way(exported):
    """Names carry no meaning: renaming every ONNX value changes nothing but the names."""
    import copy

    model, program = exported
    recorder = TorchRecorder(program)
    before = match(model, program, recorder.recorded)
    renamed = copy.deepcopy(model)
    graph_outputs = {o.name for o in renamed.graph.output} | {i.name for i in renamed.graph.input}
    mapping = {}
    for node in renamed.graph.node:
        for i, name in enumerate(node.output):
            if name and name not in graph_outputs:
                mapping[name] = f"v{len(mapping)}"
                node.output[i] = mapping[name]
    for node in renamed.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = mapping.get(name, name)
    for info in renamed.graph.value_info:
        info.name = mapping.get(info.name, info.name)
    after = match(renamed, program, recorder.recorded)
    assert {mapping.get(k, k): v for k, v in before.pairs.items()} == after.pairs
