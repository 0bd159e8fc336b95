"""The stateful probe against a real tritonserver: STEP models (a GRU with a learned initial state, a decoder with a
KV cache and a position counter) served under the sequence batcher, each sequence's state kept on the server; the
faithful deployments pass, planted ones that do not reset the state at START, or share it between correlation ids,
fail naming the sequence and the step."""

import json

import numpy as np
import pytest

from skewgate.cli import main
from skewgate.common.errors import InputError
from skewgate.common.io import load_onnx, onnx_input_specs
from skewgate.common.recording import TrackingOptions
from skewgate.common.triton.sequence import initial_state, write_sequence_repository
from skewgate.common.triton.server import triton_server
from skewgate.probe.run import ProbeOptions, run
from tests.parity.stream_models import (
    FEATURES,
    HIDDEN,
    SAMPLES,
    STEPS,
    WIDTH,
    Decoder,
    DecoderStep,
    GRUClassifier,
    Step,
    _onnx,
)

pytestmark = pytest.mark.integration

GRU_STATES = {"h": "h_next"}
DECODER_STATES = {"k": "k_next", "v": "v_next", "pos": "pos_next"}
# planted defects: text replaced in the written model.py (python_backend_sequence_model.py)
NO_RESET = {  # START resets only a correlation id never seen; END keeps the state: a reused id continues
    'if self._control(request, "START"):': 'if corrid not in self.sequences:  # planted: no reset at START',
    "self.sequences.pop(corrid, None)": "self.sequences[corrid] = state  # planted: kept after END",
}
SHARED = {  # one state for every correlation id
    'corrid = self._control(request, "CORRID")': "corrid = 0  # planted: every sequence shares one state",
}


def _plant(written, replacements):
    model_py = written.onnx.parent / "model.py"
    text = model_py.read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    model_py.write_text(text)


def _steps(directory):
    """The faithful STEP exports of parity's stream models (only STEP: the probe judges STEP alone), the GRU's
    learned initial state, and sequences for each."""
    import torch

    torch.manual_seed(0)
    gru, decoder = GRUClassifier().eval(), Decoder().eval()
    rng = np.random.default_rng(5)
    x, tokens = (rng.normal(size=(SAMPLES, STEPS, d)).astype(np.float32) for d in (FEATURES, WIDTH))
    np.savez(directory / "seq.npz", x=x)
    np.savez(directory / "dec_seq.npz", x=tokens)
    np.savez(directory / "h0.npz", h=gru.h0.detach().numpy())
    cache = torch.zeros(2, STEPS, WIDTH)
    with torch.no_grad():
        gru_step = _onnx(Step(gru), (torch.from_numpy(x[:2, 0]), torch.zeros(2, HIDDEN)), ["x", "h"],
                         ["logits", "h_next"], directory / "step.onnx")
        decoder_step = _onnx(DecoderStep(decoder), (torch.from_numpy(tokens[:2, 0]), cache, cache.clone(),
                                                    torch.zeros(2, dtype=torch.int64)),
                             ["x", "k", "v", "pos"], ["logits", "k_next", "v_next", "pos_next"],
                             directory / "dec_step.onnx")
    return ({"step": gru_step, "inputs": directory / "seq.npz", "h0": directory / "h0.npz"},
            {"step": decoder_step, "inputs": directory / "dec_seq.npz"})


def _initial(step, states, path=None):
    specs = {s.name: s for s in onnx_input_specs(load_onnx(step))}
    return initial_state({name: specs[name] for name in states}, path)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, installation):
    """One server: the GRU served right (learned h0), from zeros, without the reset, with one shared state, and
    stateless (the plain repository: the client would have to send the state); the decoder served right."""
    from skewgate.common.triton.repository import write_repository

    directory = tmp_path_factory.mktemp("stream-probe")
    gru, decoder = _steps(directory)
    repo = directory / "repository"
    h0 = _initial(gru["step"], GRU_STATES, gru["h0"])
    write_sequence_repository(gru["step"], repo, name="gru", states=GRU_STATES, initial=h0)
    write_sequence_repository(gru["step"], repo, name="gru-zeros", states=GRU_STATES,
                              initial=_initial(gru["step"], GRU_STATES))
    _plant(write_sequence_repository(gru["step"], repo, name="gru-no-reset", states=GRU_STATES, initial=h0), NO_RESET)
    _plant(write_sequence_repository(gru["step"], repo, name="gru-shared", states=GRU_STATES, initial=h0), SHARED)
    write_sequence_repository(decoder["step"], repo, name="decoder", states=DECODER_STATES,
                              initial=_initial(decoder["step"], DECODER_STATES))
    write_repository(gru["step"], repo, name="gru-plain")
    names = ("gru", "gru-zeros", "gru-no-reset", "gru-shared", "gru-plain", "decoder")
    with triton_server(repo, models=names, installation=installation) as server:
        yield server, gru, decoder


def _probe(deployed, name, *, protocol="http", **options):
    server, gru, decoder = deployed
    files = decoder if name == "decoder" else gru
    states = DECODER_STATES if name == "decoder" else GRU_STATES
    options.setdefault("initial_state", None if name == "decoder" else str(gru["h0"]))
    url = server.http_url if protocol == "http" else server.grpc_url
    return run(url=url, model=name, onnx=files["step"], inputs=files["inputs"], repository=server.repository,
               options=ProbeOptions(protocol=protocol, stream=True, states=states, **options),
               tracking=TrackingOptions()).verdict


def _checks(verdict):
    return {c.name: c for c in verdict.checks}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_faithful_gru_with_its_learned_initial_state_passes(deployed, protocol):
    verdict = _probe(deployed, "gru", protocol=protocol)
    assert verdict.status == "pass", verdict.message
    checks = _checks(verdict)
    assert {"signature.inputs", "signature.outputs", "served_artifact", "config.sequence_batching",
            "stream.sequences_match", "stream.isolation", "stream.reset"} <= set(checks)
    assert "outputs_match" not in {name.split(".")[0] for name in checks}  # no stateless request is sent
    stream = verdict.details["stream"]
    assert (stream["sequences"], stream["steps"]) == (4, STEPS)
    assert stream["first_divergence"] == {"sequences_match": None, "isolation": None, "reset": None}
    assert stream["correlation_ids"]["restarted"] == stream["correlation_ids"]["one_after_another"]
    assert "initial_state" in verdict.subject.data


def test_faithful_decoder_with_kv_cache_and_positions_passes(deployed):
    verdict = _probe(deployed, "decoder")
    assert verdict.status == "pass", verdict.message
    assert verdict.details["stream"]["initial_state"] == "zeros"


def test_state_not_reset_at_start_fails_reset_naming_sequence_and_step(deployed):
    verdict = _probe(deployed, "gru-no-reset", first_correlation_id=1000)
    checks = _checks(verdict)
    assert verdict.status == "fail"
    assert checks["stream.sequences_match"].passed and checks["stream.isolation"].passed
    detail = checks["stream.reset"].detail
    assert not checks["stream.reset"].passed
    assert "sequence 1000 (sample 2) diverges first at step 0, output 'logits'" in detail
    assert "not reset at START" in detail
    assert verdict.details["stream"]["first_divergence"]["reset"]["step"] == 0


def test_state_shared_between_interleaved_sequences_fails_isolation(deployed):
    verdict = _probe(deployed, "gru-shared", first_correlation_id=2000)
    checks = _checks(verdict)
    assert verdict.status == "fail"
    assert checks["stream.sequences_match"].passed  # one sequence at a time, a shared state goes unnoticed
    assert not checks["stream.isolation"].passed
    detail = checks["stream.isolation"].detail
    assert "state leaks between sequences" in detail
    first = verdict.details["stream"]["first_divergence"]["isolation"]
    assert 2004 <= first["correlation_id"] < 2008 and first["output"] == "logits"
    assert f"sequence {first['correlation_id']} (sample {first['sample']}) diverges first at step {first['step']}" \
        in detail


def test_initial_state_other_than_the_probes_fails_at_step_0(deployed):
    """A deployment that starts from zeros where the model learned h0 — and the other way round."""
    for name, initial in (("gru-zeros", None), ("gru", "zeros")):
        options = {"initial_state": None} if initial == "zeros" else {}
        verdict = _probe(deployed, name, first_correlation_id=3000, **options)
        failed = {c.name: c.detail for c in verdict.failed_checks}
        assert {"stream.sequences_match", "stream.isolation", "stream.reset"} <= set(failed), name
        assert "sequence 3000 (sample 0) diverges first at step 0, output 'logits'" in failed[
            "stream.sequences_match"]


def test_a_stateless_deployment_of_step_fails_the_signature_and_sequence_batching(deployed):
    """STEP served by the plain repository (no sequence batcher) asks the client for the state."""
    failed = {c.name: c.detail for c in _probe(deployed, "gru-plain").failed_checks}
    assert "served but not in the model: ['h']" in failed["signature.inputs"]
    assert "no sequence_batching" in failed["config.sequence_batching"]


def test_cli_stream_probe_on_its_own_server_and_bad_states(deployed, tmp_path):
    _, gru, _ = deployed
    base = ["probe", "--model", "gru", "--onnx", str(gru["step"]), "--inputs", str(gru["inputs"]), "--stream",
            "--state", "h=h_next"]
    assert main([*base, "--initial-state", str(gru["h0"]), "--max-sequences", "2",
                 "--report", str(tmp_path / "ok.json")]) == 0
    report = json.loads((tmp_path / "ok.json").read_text())
    assert report["details"]["stream"]["sequences"] == 2
    assert main([*base[:-1], "hidden=h_next", "--report", str(tmp_path / "bad.json")]) == 2
    assert main([*base[:-2], "--report", str(tmp_path / "none.json")]) == 2  # --stream without --state


def test_bad_initial_state_names_file_field_expected_and_found(deployed, tmp_path):
    _, gru, _ = deployed
    np.savez(tmp_path / "wide.npz", h=np.zeros((4, 8), np.float32))
    with pytest.raises(InputError, match=r"wide\.npz: h: expected shape \[1, 8\] .*found shape \[4, 8\]"):
        _initial(gru["step"], GRU_STATES, tmp_path / "wide.npz")
    verdict = run(url="127.0.0.1:1", model="gru", onnx=gru["step"], inputs=gru["inputs"],
                  options=ProbeOptions(stream=True, states={"h": "h_out"}), tracking=TrackingOptions()).verdict
    assert verdict.status == "error" and "state output 'h_out'" in verdict.message
