"""Where tritonserver is looked for ($SKEWGATE_TRITON_HOME, the checkout's `.triton`, the default), what the
error says when it is nowhere, and `probe serve` keeping out of the current folder — no server needed."""

import contextlib
from pathlib import Path

import pytest

from skewgate.cli import main
from skewgate.common.triton import server
from skewgate.common.triton.server import RunningServer, candidate_homes, checkout_home, find_installation


def _installed(home: Path) -> Path:
    for part in ("pytriton/tritonserver/bin/tritonserver",
                 "pytriton/tritonserver/backends/python/triton_python_backend_stub", "backend-env/bin/python3"):
        (home / part).parent.mkdir(parents=True, exist_ok=True)
        (home / part).write_text("")
    return home


@pytest.fixture
def places(tmp_path, monkeypatch):
    """No $SKEWGATE_TRITON_HOME, a checkout `.triton` and a default home under tmp_path, none installed."""
    monkeypatch.delenv("SKEWGATE_TRITON_HOME", raising=False)
    checkout = tmp_path / "checkout" / ".triton"
    default = tmp_path / "home" / ".cache" / "skewgate" / "triton"
    monkeypatch.setattr(server, "checkout_home", lambda: checkout)
    monkeypatch.setattr(server, "default_home", lambda: default)
    return {"checkout": checkout, "default": default, "env": tmp_path / "env"}


def test_the_checkout_home_is_the_folder_make_triton_installs_into():
    assert checkout_home() == Path(__file__).resolve().parents[2] / ".triton"


def test_the_checkout_install_is_found_without_the_variable(places):
    _installed(places["checkout"])
    assert find_installation().home == places["checkout"]


def test_the_variable_comes_first_then_the_checkout_then_the_default(places, monkeypatch):
    places["checkout"].mkdir(parents=True)
    monkeypatch.setenv("SKEWGATE_TRITON_HOME", str(places["env"]))
    assert [home for home, _ in candidate_homes()] == [places["env"], places["checkout"], places["default"]]
    _installed(places["default"])
    assert find_installation().home == places["default"]
    _installed(places["env"])
    assert find_installation().home == places["env"]


def test_a_missing_checkout_folder_is_not_a_place_to_install_into(places):
    assert [home for home, _ in candidate_homes()] == [places["default"]]
    assert server.triton_home() == places["default"]


def _says_where_it_looked(err, places):
    assert "tritonserver is not installed; looked in" in err
    for where in (places["env"], places["checkout"], places["default"]):
        assert str(where) in err
    assert "SKEWGATE_TRITON_HOME" in err and "make triton" in err
    assert "Traceback" not in err


def test_the_probe_without_a_server_exits_2_saying_where_it_looked(places, models, monkeypatch, tmp_path, capsys):
    places["checkout"].mkdir(parents=True)  # `make triton` started but never finished
    monkeypatch.setenv("SKEWGATE_TRITON_HOME", str(places["env"]))
    code = main(["probe", "--model", "mlp", "--onnx", str(models["good"]), "--inputs", str(models["inputs"]),
                 "--report", str(tmp_path / "probe.json")])
    assert code == 2
    _says_where_it_looked(capsys.readouterr().err, places)


def test_probe_serve_without_a_server_exits_2_before_writing_anything(places, models, monkeypatch, tmp_path,
                                                                      capsys):
    places["checkout"].mkdir(parents=True)
    monkeypatch.setenv("SKEWGATE_TRITON_HOME", str(places["env"]))
    monkeypatch.chdir(places["checkout"].parent)
    workdir = tmp_path / "serve"
    assert main(["probe", "serve", "--onnx", str(models["good"]), "--name", "mlp", "--workdir", str(workdir)]) == 2
    _says_where_it_looked(capsys.readouterr().err, places)
    assert not workdir.exists()
    assert [p.name for p in places["checkout"].parent.iterdir()] == [".triton"]


def test_probe_serve_writes_under_the_temp_dir_not_the_current_folder(places, models, monkeypatch, tmp_path,
                                                                      capsys):
    from skewgate.probe import cli

    started = {}

    @contextlib.contextmanager
    def fake_server(repository, *, models, installation, log_path):
        started.update(repository=Path(repository), models=models, installation=installation, log=log_path)
        yield RunningServer("127.0.0.1:1", "127.0.0.1:2", log_path, Path(repository))

    def interrupt(_seconds):
        raise KeyboardInterrupt

    _installed(places["checkout"])
    monkeypatch.setattr(server, "triton_server", fake_server)
    monkeypatch.setattr(cli.time, "sleep", interrupt)
    monkeypatch.setattr(cli, "SERVE_WORKDIR", tmp_path / "tmp" / "skewgate-probe-serve")
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["probe", "serve", "--onnx", str(models["good"]), "--name", "mlp"]) == 0
    assert list(here.iterdir()) == []
    assert started["repository"] == tmp_path / "tmp" / "skewgate-probe-serve" / "triton-repo"
    assert started["log"] == tmp_path / "tmp" / "skewgate-probe-serve" / "tritonserver.log"
    assert started["installation"].home == places["checkout"]
    assert (started["repository"] / "mlp" / "config.pbtxt").is_file()
    assert f"--repository {started['repository']}" in capsys.readouterr().err


def test_serve_writes_to_the_system_temp_dir_by_default():
    import tempfile

    from skewgate.probe.cli import build_parser

    args = build_parser().parse_args(["serve", "--onnx", "m.onnx", "--name", "m"])
    assert args.workdir == Path(tempfile.gettempdir()) / "skewgate-probe-serve" and args.repository is None
