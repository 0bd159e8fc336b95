import json

import numpy as np
import pytest

from skewgate.cli import main
from skewgate.common.processes import free_port
from tests.export.models import examples


def _run(*args):
    return main(["export", *map(str, args)])


def test_pass_exits_0_and_writes_the_report(pt2, example_npz, tmp_path, capsys):
    code = _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--report", tmp_path / "r.json")
    assert code == 0
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "pass"
    err = capsys.readouterr().err
    assert "export: PASS" in err
    # no key: said at once, not first at promote (#36 item 3)
    assert "skewgate export: the verdict is not signed" in err and "--allow-unsigned" in err


def test_a_signed_export_says_nothing_of_signing(pt2, example_npz, tmp_path, capsys):
    from skewgate.common import attest

    key, _ = attest.generate_keys(tmp_path / "keys")
    assert _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx", "--report",
                tmp_path / "r.json", "--signing-key", key) == 0
    assert "not signed" not in capsys.readouterr().err
    assert attest.envelope_path(tmp_path / "r.json").is_file()


def test_failed_gate_exits_1(pt2, example_npz, tmp_path, capsys):
    code = _run("--model", pt2("train_mode"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--report", tmp_path / "r.json")
    assert code == 1
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "fail"
    assert "FAIL lint.batchnorm_eval_mode" in capsys.readouterr().err


def test_bad_input_exits_2_with_a_message_naming_the_field(pt2, tmp_path, capsys):
    npz = tmp_path / "bad.npz"
    np.savez(npz, pixels=examples(3))
    code = _run("--model", pt2("good"), "--inputs", npz, "--out", tmp_path / "m.onnx", "--report",
                tmp_path / "r.json")
    assert code == 2
    err = capsys.readouterr().err
    assert "bad.npz: x: expected model input float32[N, 1, 8, 8], found no such array" in err
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "error"


def test_malformed_tolerance_exits_2(pt2, example_npz, tmp_path):
    assert _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tolerance", "linear=abc") == 2


def test_unreachable_mlflow_exits_2_within_the_deadline(pt2, example_npz, tmp_path, capsys):
    port = free_port()  # nothing listens there
    code = _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tracking-uri", f"http://127.0.0.1:{port}", "--mlflow-deadline", "2")
    assert code == 2
    assert "unreachable" in capsys.readouterr().err


def test_a_tracking_server_that_drips_exits_2_at_the_deadline(pt2, example_npz, tmp_path, capsys):
    """#32 item 7: export against a server that answers the experiment lookup, then one byte a second."""
    from tests.support.drip import DripServer

    server = DripServer(experiment="skewgate")
    try:
        code = _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                    "--tracking-uri", server.url, "--experiment", "skewgate", "--mlflow-deadline", "2")
    finally:
        server.close()
    assert code == 2
    assert "not done within 2 s (--mlflow-deadline)" in capsys.readouterr().err


def test_logs_to_mlflow_when_a_tracking_uri_is_given(mlflow_db, pt2, example_npz, tmp_path):
    from mlflow import MlflowClient

    uri = mlflow_db
    assert _run("--model", pt2("good"), "--inputs", example_npz, "--out", tmp_path / "m.onnx",
                "--tracking-uri", uri, "--experiment", "exp", "--pipeline-run-id", "run-1") == 0
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("exp")
    runs = client.search_runs([experiment.experiment_id], "tags.`skewgate.step` = 'export'")
    assert len(runs) == 1
    assert runs[0].data.metrics["export.outputs_match.linear"] <= 1.0
    assert runs[0].data.tags["skewgate.status"] == "pass"
    artifacts = {a.path for a in client.list_artifacts(runs[0].info.run_id)}
    assert {"export.verdict.json", "checks.json", "tensor_stats.json"} <= artifacts


@pytest.mark.parametrize("argv", [["--help"], ["export", "--help"], ["promote", "--help"],
                                  ["pipeline", "--help"]], ids=" ".join)
def test_help_exits_0(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_unknown_command_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["nope"])
    assert info.value.code == 2


SNIPPET = ('program = torch.export.export(model, (example,), dynamic_shapes={"x": {0: torch.export.Dim("batch")}}) '
           'then torch.export.save(program, "model.pt2")')


def _refused(model, example_npz, tmp_path, capsys):
    code = _run("--model", model, "--inputs", example_npz, "--out", tmp_path / "m.onnx", "--report",
                tmp_path / "r.json")
    err = capsys.readouterr().err
    assert code == 2, err
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "error"
    assert "Traceback" not in err
    return err


def test_a_torch_save_checkpoint_exits_2_saying_what_it_is_and_how_to_export(example_npz, tmp_path, capsys):
    import torch

    from tests.export.models import SmallNet

    checkpoint = tmp_path / "model.pt"
    torch.save(SmallNet().state_dict(), checkpoint)
    err = _refused(checkpoint, example_npz, tmp_path, capsys)
    assert "model.pt: expected a torch.export program (.pt2) with no pickled entries, found a torch.save " \
           "checkpoint" in err
    assert SNIPPET in err


def test_an_onnx_file_exits_2_pointing_at_parity(example_npz, tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1, 8, 8])])
    model = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    err = _refused(model, example_npz, tmp_path, capsys)
    assert "model.onnx: expected a torch.export program (.pt2)" in err
    assert "found an ONNX model; skewgate export takes the PyTorch program" in err
    assert SNIPPET in err
    assert "to judge an existing ONNX file use skewgate parity --onnx" in err


def test_a_program_traced_with_a_fixed_batch_exits_2_saying_how_to_re_export(pt2, example_npz, tmp_path, capsys):
    err = _refused(pt2("static_batch"), example_npz, tmp_path, capsys)  # traced at batch 4, 12 examples given
    assert "static_batch.pt2: x: expected a program that takes any batch size, found a program traced with a " \
           "fixed batch: it takes float32[4, 1, 8, 8] only (axis 0 = 4) and examples.npz holds 12 samples" in err
    assert SNIPPET in err
