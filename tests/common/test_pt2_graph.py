"""The direct `.pt2` graph reader must give parity exactly what `torch.export.load` gives: the same nodes (names,
op targets, arguments as FX prints them), the same shapes and module paths, and bit-identical outputs; and hand
anything it does not rebuild to `torch.export.load`."""

import json
import zipfile

import numpy as np
import pytest

from skewgate.common.errors import InputError
from skewgate.common.layers import value_dims
from skewgate.common.pt2 import load_exported_program, load_program
from skewgate.common.pt2_graph import Unsupported, load_pt2_graph
from tests.zoo import ZOO, save


def _outputs(module, feeds):
    import torch

    with torch.no_grad():
        return torch.utils._pytree.tree_leaves(module(*[torch.from_numpy(a) for a in feeds]))


@pytest.mark.parametrize("name", list(ZOO))
def test_the_graph_reader_rebuilds_what_torch_export_load_does(name, tmp_path):
    import torch

    files = save(name, tmp_path)
    ours, theirs = load_pt2_graph(files.pt2), load_exported_program(files.pt2)
    assert ours.graph_signature.user_inputs == tuple(theirs.graph_signature.user_inputs)
    assert ours.graph_signature.user_outputs == tuple(theirs.graph_signature.user_outputs)
    mine = [n for n in ours.graph.nodes if n.op == "call_function"]
    torch_nodes = [n for n in theirs.graph.nodes if n.op == "call_function"]
    # matching reads exactly these: FX's printed node (name, target, arguments), shape, module path
    assert [n.format_node() for n in mine] == [n.format_node() for n in torch_nodes]
    assert [value_dims(n.meta.get("val")) for n in mine] == [value_dims(n.meta.get("val")) for n in torch_nodes]
    assert [n.meta.get("nn_module_stack") for n in mine] == [n.meta.get("nn_module_stack") for n in torch_nodes]
    arrays = np.load(files.inputs)
    feeds = [arrays[k][:5] for k in ours.graph_signature.user_inputs]
    for a, b in zip(_outputs(ours.module(), feeds), _outputs(theirs.module(), feeds), strict=True):
        assert torch.equal(a, b)  # bit for bit: same ops, same weights, same kernels


def test_a_program_that_updates_buffers_in_place_computes_as_torchs(tmp_path):
    """BatchNorm left in training mode: every forward updates the running statistics, on both sides alike."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4)).train()
    x = torch.randn(8, 4)
    path = tmp_path / "train_bn.pt2"
    torch.export.save(torch.export.export(model, (x,)), str(path))
    ours, theirs = load_pt2_graph(path).module(), load_exported_program(path).module()
    for _ in range(2):
        assert torch.equal(_outputs(ours, [x.numpy()])[0], _outputs(theirs, [x.numpy()])[0])


def test_control_flow_goes_to_torch_export_load(tmp_path):
    import torch

    class Branchy(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, (x,))

    x = torch.randn(3, 4)
    path = tmp_path / "branchy.pt2"
    torch.export.save(torch.export.export(Branchy(), (x,)), str(path))
    np.savez(tmp_path / "x.npz", x=x.numpy())
    with pytest.raises(Unsupported):
        load_pt2_graph(path)
    program, sha = load_program(str(path), tmp_path / "x.npz", graph_only=True)
    assert isinstance(program, torch.export.ExportedProgram) and sha
    assert torch.equal(program.module()(x), torch.where(x.sum() > 0, x * 2, x - 1))


def test_a_graph_it_cannot_read_is_judged_by_torch_export_load(tmp_path):
    files = save("layernorm_mlp", tmp_path)
    broken = tmp_path / "broken.pt2"
    with zipfile.ZipFile(files.pt2) as src, zipfile.ZipFile(broken, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                del program["graph_module"]["graph"]["tensor_values"]
                data = json.dumps(program).encode()
            dst.writestr(info, data)
    with pytest.raises(Unsupported):
        load_pt2_graph(broken)
    # torch's own reader has the last word: here it refuses the file, named as the input it is
    with pytest.raises(InputError, match=r"broken\.pt2: expected a torch.export program"):
        load_program(str(broken), files.inputs, graph_only=True)
