"""verify_champion against stored evidence that is not what a download leaves: FIFOs and links to devices; and
against model folders whose MLmodel loads something other than the gated bytes."""

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import yaml

from skewgate.common.io import sha256_file
from skewgate.common.policy import DEFAULT_BOUNDS, GatePolicy
from skewgate.common.registry import Champion
from skewgate.verify.core import verify_champion
from tests.common.test_io import deadline
from tests.promote.fake_registry import FakeRegistry
from tests.promote.test_core import NAME, PASSING, TRUSTED, _verdict, _write, promote


@pytest.fixture
def champion(tmp_path, tiny_onnx):
    """A champion promoted on signed evidence, laid out as `RegistryChampions` downloads it."""
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    onnx_file = model_dir / "model.onnx"
    onnx_file.write_bytes(tiny_onnx.read_bytes())
    (model_dir / "MLmodel").write_text(yaml.safe_dump(_mlmodel()))
    registry = FakeRegistry()
    verdicts = _write(tmp_path / "v", _verdict("export", PASSING, sha256_file(onnx_file)))
    assert promote(model_name=NAME, onnx=onnx_file, verdicts_dir=verdicts, registry=registry).status == "pass"
    attestations = tmp_path / "attestations"
    attestations.mkdir()
    for name, content in registry.attestations[(NAME, "1")].items():
        (attestations / name).write_bytes(content)
    return Champion(model_name=NAME, alias="champion", version="1", tags=registry.versions[NAME]["1"],
                    model_dir=model_dir, attestations_dir=attestations)


def _mlmodel(data="model.onnx"):
    """What `mlflow.onnx.save_model` writes (the keys verify reads, and a few it does not)."""
    env = {"conda": "conda.yaml", "virtualenv": "python_env.yaml"}
    return {"flavors": {"onnx": {"code": None, "data": data, "onnx_version": "1.19.0",
                                 "providers": ["CPUExecutionProvider"]},
                        "python_function": {"data": data, "env": env, "loader_module": "mlflow.onnx",
                                            "python_version": "3.11.7"}},
            "mlflow_version": "3.5.0", "model_uuid": "0" * 32}


class _Source:
    """The registry's reader (`ChampionReader`) holding one downloaded champion (and, by name, the other models'
    versions the alias points at): what it hands out is what was asked for, files and attestations only when
    asked."""

    def __init__(self, champion, **others):
        self.champions = {champion.model_name: champion, **others}

    def fetch(self, name, alias, workdir=None, *, attestations=False):
        champion = self.champions.get(name)
        if champion is None:
            return None
        if workdir is None:
            return dataclasses.replace(champion, model_dir=None, attestations_dir=None)
        return champion if attestations else dataclasses.replace(champion, attestations_dir=None)


def _verify(champion, tmp_path, *, alias="champion", required=(), bounds=DEFAULT_BOUNDS, **others):
    return verify_champion(model_name=NAME, alias=alias, source=_Source(champion, **others), trusted=TRUSTED,
                           workdir=tmp_path, gates=GatePolicy(required=required, bounds=bounds).promoting(alias))


def _failed(verdict):
    return {c.name: c.detail for c in verdict.checks if not c.passed}


def test_the_stored_evidence_verifies(champion, tmp_path):
    assert _verify(champion, tmp_path).status == "pass"


@pytest.mark.skipif(not Path("/dev/zero").exists() or not hasattr(os, "mkfifo"), reason="needs a POSIX /dev")
@pytest.mark.parametrize(("entry", "check"), [("export.json", "evidence.export"),
                                              ("export.intoto.jsonl", "evidence.export"),
                                              ("promotion.intoto.jsonl", "attestation.promotion")])
@pytest.mark.parametrize(("make", "found"), [(os.mkfifo, "found a FIFO"),
                                             (lambda p: p.symlink_to("/dev/zero"), "a character device")])
def test_a_stored_file_that_is_not_a_regular_file_fails_without_being_read(champion, tmp_path, entry, check, make,
                                                                             found):
    assert champion.attestations_dir is not None
    (champion.attestations_dir / entry).unlink()
    make(champion.attestations_dir / entry)
    with deadline():
        result = _verify(champion, tmp_path)
    assert result.status == "fail"
    (failed,) = [c for c in result.checks if c.name == check]
    assert not failed.passed and entry in failed.detail and found in failed.detail


def _other_model(tiny_onnx, path):
    """A valid ONNX model that is not the gated one (same graph, other weights)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(tiny_onnx))
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((4, 2), 7, np.float32), name="W"))
    onnx.save(model, str(path))
    return path


def test_the_gated_bytes_beside_another_served_model_fail(champion, tmp_path, tiny_onnx):
    """Once accepted: any *.onnx in the folder with the gated digest passed, whatever MLmodel loads."""
    model_dir = champion.model_dir
    shutil.copyfile(model_dir / "model.onnx", model_dir / "orig.onnx")
    _other_model(tiny_onnx, model_dir / "model.onnx")
    failed = _failed(_verify(champion, tmp_path))
    assert set(failed) == {"artifact.sha256", "model.files"}
    assert failed["artifact.sha256"].startswith("model.onnx (the file MLmodel loads) has sha256 ")
    assert failed["model.files"] == "other model files beside model.onnx: orig.onnx"


def test_mlmodel_pointed_at_a_new_file_fails(champion, tmp_path, tiny_onnx):
    model_dir = champion.model_dir
    _other_model(tiny_onnx, model_dir / "new.onnx")
    (model_dir / "MLmodel").write_text(yaml.safe_dump(_mlmodel("new.onnx")))
    failed = _failed(_verify(champion, tmp_path))
    assert set(failed) == {"artifact.sha256", "model.files"}
    assert "new.onnx (the file MLmodel loads)" in failed["artifact.sha256"]
    assert failed["model.files"] == "other model files beside new.onnx: model.onnx"


@pytest.mark.parametrize(("edit", "found"), [
    (lambda m: m["flavors"]["python_function"].update(loader_module="mlflow.sklearn"),
     "python_function loads through 'mlflow.sklearn', not 'mlflow.onnx'"),
    (lambda m: m["flavors"]["python_function"].update(data="orig.onnx"),
     "python_function loads data 'orig.onnx', the onnx flavour 'model.onnx'"),
    (lambda m: m["flavors"]["onnx"].update(code="code"), "the onnx flavour puts code 'code' on the import path"),
    (lambda m: m["flavors"].update(sklearn={"pickled_model": "model.pkl"}),
     "flavours ['onnx', 'python_function', 'sklearn']"),
    (lambda m: m["flavors"]["onnx"].update(data="../model/model.onnx") or
     m["flavors"]["python_function"].update(data="../model/model.onnx"), "is outside the model folder"),
    (lambda m: m["flavors"]["onnx"].update(data=None) or m["flavors"]["python_function"].update(data=None),
     "the onnx flavour's data is None, not a file name"),
])
def test_an_mlmodel_that_loads_anything_else_fails_naming_it(champion, tmp_path, edit, found):
    mlmodel = _mlmodel()
    edit(mlmodel)
    (champion.model_dir / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    failed = _failed(_verify(champion, tmp_path))
    assert set(failed) == {"model.loads", "artifact.sha256"}
    assert found in failed["model.loads"]


def test_no_mlmodel_fails(champion, tmp_path):
    (champion.model_dir / "MLmodel").unlink()
    failed = _failed(_verify(champion, tmp_path))
    assert "MLmodel: expected an MLmodel file, found no such file" in failed["model.loads"]


def test_external_data_fails_referenced_or_not(champion, tmp_path, tiny_onnx):
    """The gated digest covers the .onnx only: weights in a .data file beside it could be anything."""
    import onnx

    from skewgate.common.io import sha256_file

    external = tmp_path / "external"
    external.mkdir()
    model = onnx.load(str(tiny_onnx))
    onnx.save(model, str(external / "model.onnx"), save_as_external_data=True, location="weights.data",
              size_threshold=0)
    for name in ("model.onnx", "weights.data"):
        shutil.copyfile(external / name, champion.model_dir / name)
    champion.tags["skewgate.onnx_sha256"] = sha256_file(champion.model_dir / "model.onnx")
    failed = _failed(_verify(champion, tmp_path))
    assert failed["model.files"] == "model.onnx references external data weights.data, which no gated digest covers"
    (champion.model_dir / "model.onnx").write_bytes(tiny_onnx.read_bytes())  # self-contained: the .data is unused
    champion.tags["skewgate.onnx_sha256"] = sha256_file(tiny_onnx)
    assert _failed(_verify(champion, tmp_path))["model.files"] == "other model files beside model.onnx: weights.data"


def test_the_decision_binds_alias_and_required_steps(champion, tmp_path):
    assert _verify(champion, tmp_path, required=("export",)).status == "pass"
    failed = _failed(_verify(champion, tmp_path, alias="staging"))
    assert failed == {"attestation.promotion": "the signed decision promoted 'digits' version 1 under alias "
                                               "'champion', not 'digits' under alias 'staging'"}
    failed = _failed(_verify(champion, tmp_path, required=("export", "parity")))
    assert failed["policy.required"] == "the decision required export, not parity; asked for export, parity"
    assert "evidence.parity" in failed  # a step asked for is checked too, and there is no verdict for it



def test_a_stateful_champion_verifies_with_the_probe_judged_on_the_step_model_its_decision_names(tmp_path, tiny_onnx):
    import onnx

    from tests.promote.test_stream import REQUIRED, _evidence, _promote

    model_dir = tmp_path / "model"
    model_dir.mkdir()
    full, step = model_dir / "model.onnx", tmp_path / "step.onnx"
    full.write_bytes(tiny_onnx.read_bytes())
    model = onnx.load(str(tiny_onnx))
    model.producer_name = "step stand-in"
    onnx.save(model, str(step))
    (model_dir / "MLmodel").write_text(yaml.safe_dump(_mlmodel()))
    registry = FakeRegistry()
    assert _promote(_evidence(tmp_path / "v", full, step), full, step, registry).status == "pass"
    stored = tmp_path / "attestations"
    stored.mkdir()
    for name, content in registry.attestations[(NAME, "1")].items():
        (stored / name).write_bytes(content)
    champion = Champion(model_name=NAME, alias="champion", version="1", tags=registry.versions[NAME]["1"],
                        model_dir=model_dir, attestations_dir=stored)
    step_dir = tmp_path / "step-model"
    step_dir.mkdir()
    shutil.copyfile(step, step_dir / "model.onnx")
    (step_dir / "MLmodel").write_text(yaml.safe_dump(_mlmodel()))
    served = Champion(model_name=f"{NAME}-step", alias="champion", version="1",
                      tags=registry.versions[f"{NAME}-step"]["1"], model_dir=step_dir)
    verdict = _verify(champion, tmp_path, required=REQUIRED, **{f"{NAME}-step": served})
    assert verdict.status == "pass", _failed(verdict)
    assert verdict.check("evidence.probe").passed and verdict.check("served.step_model").passed

    # #32 item 3: `<name>-step@champion` moved to a model that ignores its state (here: the FULL file), or gone
    other = tmp_path / "other-step"
    shutil.copytree(model_dir, other)
    moved = dataclasses.replace(served, version="2", model_dir=other)
    failed = _failed(_verify(champion, tmp_path / "moved", required=REQUIRED, **{f"{NAME}-step": moved}))
    assert set(failed) == {"served.step_model"}
    assert f"model.onnx (the file MLmodel loads) has sha256 {sha256_file(full)}" in failed["served.step_model"]
    failed = _failed(_verify(champion, tmp_path / "gone", required=REQUIRED))
    assert failed == {"served.step_model": f"{NAME}-step has no alias 'champion', but the decision names the STEP "
                                           f"model sha256 {sha256_file(step)} as served"}


@pytest.mark.parametrize("alias", ["champion", "staging"])
def test_a_model_or_alias_that_resolves_to_nothing_fails_naming_both(champion, tmp_path, alias):
    """#36 item 3: a model that did not exist read "has no alias 'champion'", whatever --alias said."""
    verdict = verify_champion(model_name="no-such-model", alias=alias, source=_Source(champion), trusted=TRUSTED,
                              workdir=tmp_path, gates=GatePolicy().promoting(alias))
    assert verdict.status == "fail"
    assert _failed(verdict) == {"champion.resolved": f"no version of 'no-such-model' holds the alias {alias!r} "
                                                     "(no such registered model, or the alias is unset)"}
