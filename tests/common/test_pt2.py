"""Opening a candidate `.pt2` must never run code: pickled payloads are refused before they are read."""

import io
import json
import os
import pickle
import zipfile

import pytest

from skewgate.common.errors import InputError
from skewgate.common.pt2 import load_exported_program

MARKER_ENV = "SKEWGATE_TEST_PWNED"


class Payload:
    """Unpickling this creates the file named in the environment: proof that code ran."""

    def __reduce__(self):
        return (open, (os.environ[MARKER_ENV], "w"))


def _pickled() -> bytes:
    buffer = io.BytesIO()
    pickle.dump(Payload(), buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def program_file(tmp_path_factory):
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.linear(x)

    torch.manual_seed(0)
    program = torch.export.export(Net().eval(), (torch.randn(3, 4),),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    path = tmp_path_factory.mktemp("pt2") / "net.pt2"
    torch.export.save(program, str(path))
    return path, program


def _rewrite(source, target, change):
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, change(info.filename, src.read(info)))
    return target


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "pwned"
    monkeypatch.setenv(MARKER_ENV, str(path))
    return path


def test_a_clean_archive_loads_and_computes_what_was_saved(program_file):
    import torch

    path, program = program_file
    x = torch.randn(5, 4)
    torch.testing.assert_close(load_exported_program(path).module()(x), program.module()(x))


def test_a_payload_in_the_sample_inputs_never_runs(program_file, tmp_path, marker):
    import torch

    path, program = program_file
    evil = _rewrite(path, tmp_path / "evil.pt2",
                    lambda name, data: _pickled() if "sample_inputs" in name else data)
    loaded = load_exported_program(evil)  # sample inputs are not needed, so the archive still loads
    assert not marker.exists()
    x = torch.randn(2, 4)
    torch.testing.assert_close(loaded.module()(x), program.module()(x))


def test_weights_marked_use_pickle_are_refused_naming_the_entry(program_file, tmp_path, marker):
    path, _ = program_file

    def change(name, data):
        if name.endswith("_weights_config.json"):
            config = json.loads(data)
            first = next(iter(config["config"].values()))
            first["use_pickle"] = True
            return json.dumps(config).encode()
        if "/data/weights/weight_" in name:
            return _pickled()
        return data

    evil = _rewrite(path, tmp_path / "evil.pt2", change)
    with pytest.raises(InputError, match=r"data/weights/weight_0: expected a torch.export program .* stored as pickle"):
        load_exported_program(evil)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "found"),
    [pytest.param(b"not a zip", "not a zip archive", id="not-zip"),
     pytest.param(None, "no models/<name>.json", id="zip-without-model")],
)
def test_files_that_are_not_programs_are_bad_input(tmp_path, content, found):
    path = tmp_path / "x.pt2"
    if content is None:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("x/data.txt", "hello")
    else:
        path.write_bytes(content)
    with pytest.raises(InputError, match=found):
        load_exported_program(path)


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy-pickle"])
def test_a_torch_save_checkpoint_is_named_with_the_export_to_run_instead(tmp_path, zipped, marker):
    import torch

    checkpoint = tmp_path / "weights.pt"
    torch.save({"linear.weight": torch.zeros(2, 4)}, checkpoint, _use_new_zipfile_serialization=zipped)
    with pytest.raises(InputError, match=r"found a torch\.save checkpoint") as info:
        load_exported_program(checkpoint)
    assert 'dynamic_shapes={"x": {0: torch.export.Dim("batch")}}) then torch.export.save(program, "model.pt2")' \
        in str(info.value)
    assert not marker.exists()


def test_an_unknown_file_is_still_not_a_zip_archive(tmp_path):
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"hello, not a program")
    with pytest.raises(InputError, match=r"found not a zip archive$"):
        load_exported_program(junk)
