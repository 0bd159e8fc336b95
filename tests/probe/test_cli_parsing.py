"""`skewgate probe` flags and its `serve` / `install` subcommands, parsed without a server."""

import pytest

from skewgate.cli import main
from skewgate.probe.cli import _install, _serve, build_parser
from skewgate.probe.run import ProbeOptions


def test_probe_flags_default_to_the_options_defaults():
    args = build_parser().parse_args(["--model", "m", "--onnx", "m.onnx", "--inputs", "x.npz"])
    defaults = ProbeOptions()
    assert args.command is None
    assert (args.protocol, args.deadline, args.max_p99_ms, args.model_version) == (
        defaults.protocol, defaults.deadline_s, defaults.max_p99_ms, defaults.version)
    assert (args.stream, args.state, args.initial_state, args.max_sequences) == (
        defaults.stream, [], defaults.initial_state, defaults.max_sequences)


@pytest.mark.parametrize(("argv", "handler"), [
    pytest.param(["serve", "--onnx", "m.onnx", "--name", "m"], _serve, id="serve"),
    pytest.param(["install", "--home", "/tmp/triton"], _install, id="install"),
])
def test_subcommands_are_subparsers(argv, handler):
    args = build_parser().parse_args(argv)
    assert args.command == argv[0] and args.handler is handler


def test_serve_needs_its_own_flags(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "serve", "--onnx", "m.onnx"])
    assert exit_info.value.code == 2
    assert "--name" in capsys.readouterr().err


def test_the_probe_needs_model_onnx_and_inputs(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["probe", "--url", "127.0.0.1:1", "--model", "m"])
    assert exit_info.value.code == 2
    assert "the following arguments are required: --onnx, --inputs" in capsys.readouterr().err


def test_a_protocol_that_is_neither_http_nor_grpc_is_bad_input_recorded_as_an_error_verdict(tmp_path):
    from skewgate.common.errors import InputError
    from skewgate.common.recording import TrackingOptions
    from skewgate.probe.run import run

    options = ProbeOptions(protocol="tcp")  # type: ignore[arg-type]  # the component's parameter is any string
    with pytest.raises(InputError, match="protocol: expected one of"):
        options.check()
    verdict = run(url="127.0.0.1:1", model="m", onnx=tmp_path / "m.onnx", inputs=tmp_path / "x.npz",
                  options=options, tracking=TrackingOptions()).verdict
    assert verdict.status == "error" and verdict.message.startswith("protocol: expected one of")


def test_state_options_without_stream_are_bad_input():
    from skewgate.common.errors import InputError

    with pytest.raises(InputError, match="--stream"):
        ProbeOptions(states={"h": "h_next"}).check()
    with pytest.raises(InputError, match="--state"):
        ProbeOptions(stream=True).check()
