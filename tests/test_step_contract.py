"""The step contract, literally: every step folder holds the same five files (anything else lives in one
clearly named subpackage), and each component's parameter defaults are the options dataclass's defaults."""

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path

import pytest

import skewgate

ROOT = Path(skewgate.__file__).parent
STEPS = ("export", "calibrate", "drift", "parity", "probe", "promote", "compare", "verify", "preprocess", "estimate")
CONTRACT = {"__init__.py", "core.py", "run.py", "cli.py", "component.py", "README.md"}


@pytest.mark.parametrize("step", STEPS)
def test_every_step_folder_has_the_same_five_files(step):
    folder = ROOT / step
    files = {p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".py", ".md")}
    assert files >= CONTRACT, f"{step} lacks {sorted(CONTRACT - files)}"
    assert files <= CONTRACT, f"{step} has loose modules {sorted(files - CONTRACT)}: move them into a subpackage"
    for package in (p for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (package / "__init__.py").is_file(), f"{package} is not a package"


def test_the_readme_layout_names_every_step_folder():
    readme = (ROOT.parents[1] / "README.md").read_text(encoding="utf-8")
    for step in STEPS:
        assert f"{step}/" in readme, f"the README's layout section does not name {step}/"


def test_every_package_folder_ships_in_the_wheel():
    """pyproject's `packages.find` ships regular packages only: a folder of modules without `__init__.py` imports
    here (the editable install) and is missing from the wheel, so from the image."""
    from setuptools import find_packages

    shipped = set(find_packages(ROOT.parent, include=["skewgate*"]))
    folders = {".".join(folder.relative_to(ROOT.parent).parts) for folder in {p.parent for p in ROOT.rglob("*.py")}}
    assert folders <= shipped, f"not shipped (no __init__.py): {sorted(folders - shipped)}"
    assert "skewgate.pipelines" in shipped


def test_one_version_string():
    """`skewgate.__version__` is the version: the wheel's (pyproject reads it), the image tags', the pipeline
    version prefix's and the chart's appVersion (which Helm needs spelled out; this holds it equal)."""
    import tomllib

    import yaml

    from skewgate.common.images import GPU_IMAGE, IMAGE
    from skewgate.pipelines.schedule import Schedule

    project = tomllib.loads((ROOT.parents[1] / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "skewgate.__version__"}
    chart = yaml.safe_load((ROOT.parents[1] / "charts" / "skewgate" / "Chart.yaml").read_text())
    assert chart["appVersion"] == skewgate.__version__
    if "SKEWGATE_IMAGE" not in os.environ:
        assert IMAGE.endswith(f":{skewgate.__version__}") and GPU_IMAGE.endswith(f":{skewgate.__version__}")
    assert Schedule(cron="0 0 2 * * *", params={}).version == skewgate.__version__


def _components_with_an_alias():
    from skewgate.compare.component import compare_op
    from skewgate.drift.component import nightly_drift_op, nightly_drift_plan_op
    from skewgate.pipelines.nightly_drift import nightly_drift
    from skewgate.pipelines.release_gate import release_gate
    from skewgate.promote.component import promote_op
    from skewgate.verify.component import verify_op

    return [compare_op, nightly_drift_op, nightly_drift_plan_op, promote_op, verify_op, release_gate, nightly_drift]


def test_every_alias_parameter_defaults_to_the_one_alias(tmp_path):
    """KFP signatures spell the alias out; they must say what the options say (common.steps.DEFAULT_ALIAS)."""
    from skewgate.common.steps import DEFAULT_ALIAS
    from tests.support.components import parameter_defaults

    for component in _components_with_an_alias():
        assert parameter_defaults(component, tmp_path)["alias"] == DEFAULT_ALIAS, component.name


def _components_and_options():
    """(component, the options dataclass its step's run.py gives it) for every KFP component with defaults."""
    from skewgate.calibrate.component import calibrate_op
    from skewgate.calibrate.run import CalibrateOptions
    from skewgate.compare.component import compare_op
    from skewgate.compare.run import CompareOptions
    from skewgate.drift.component import drift_op, nightly_drift_merge_op, nightly_drift_op, nightly_drift_plan_op
    from skewgate.drift.run import DriftOptions, NightlyOptions
    from skewgate.estimate.component import estimate_op
    from skewgate.estimate.core import EstimateOptions
    from skewgate.export.component import export_op
    from skewgate.export.run import ExportOptions
    from skewgate.parity.component import parity_op
    from skewgate.parity.run import ParityOptions
    from skewgate.preprocess.component import preprocess_op
    from skewgate.preprocess.run import PreprocessOptions
    from skewgate.probe.component import triton_probe_op
    from skewgate.probe.run import ProbeOptions
    from skewgate.promote.component import promote_op
    from skewgate.promote.run import PromoteOptions
    from skewgate.verify.component import verify_op
    from skewgate.verify.run import VerifyOptions

    return [(export_op, ExportOptions), (calibrate_op, CalibrateOptions), (drift_op, DriftOptions),
            (nightly_drift_op, NightlyOptions), (nightly_drift_plan_op, NightlyOptions),
            (nightly_drift_merge_op, NightlyOptions), (parity_op, ParityOptions), (triton_probe_op, ProbeOptions),
            (preprocess_op, PreprocessOptions), (compare_op, CompareOptions), (promote_op, PromoteOptions),
            (verify_op, VerifyOptions), (estimate_op, EstimateOptions)]


# A parameter spelt otherwise than its field (KFP's signature is the pipelines' interface: it keeps its names).
RENAMED = {"compare-op": {"thresholds": "threshold_specs"}, "promote-op": {"required_steps": "required"},
           "verify-op": {"required_steps": "required"}}
# TrackingOptions' fields, as the components spell them
TRACKING = {"tracking_uri": "uri", "experiment": "experiment", "pipeline_run_id": "pipeline_run_id",
            "mlflow_deadline": "deadline_s"}
# Defaults a component keeps apart on purpose, with why.
DELIBERATE = {
    ("parity-op", "layerwise"): True,  # on in the pipeline: promote's evidence names the first diverging layer
    ("triton-probe-op", "experiment"): "",  # empty: the model's name, as the other gates record under
}


def _means(parameter, value) -> bool:
    """Whether a KFP parameter's default says the field's: None as the parameter's "not set" (empty text: a
    sentinel number such as -1 reads as a value in the run form), a tuple as comma-separated text, an empty
    mapping as empty text, anything else as itself (a `Literal` is its string; a flag stays a flag, not a
    number)."""
    if value is None:
        return parameter == ""
    if isinstance(value, tuple | list):
        return parameter == ",".join(map(str, value))
    if isinstance(value, Mapping):
        return not value and parameter == ""
    return parameter == value and isinstance(parameter, bool) == isinstance(value, bool)


@pytest.mark.parametrize(("component", "options"), _components_and_options(), ids=lambda c: getattr(c, "name", None))
def test_every_component_parameter_defaults_to_its_options_default(tmp_path, component, options):
    """KFP needs the defaults spelt out in the signature: each parameter named like a field of the step's options
    dataclass (or of `TrackingOptions`) defaults to that field's default, but for the few kept apart on purpose."""
    from skewgate.common.recording import TrackingOptions
    from tests.support.components import parameter_defaults

    fields = {f.name: getattr(options(), f.name) for f in dataclasses.fields(options)}
    tracking = {name: getattr(TrackingOptions(), field) for name, field in TRACKING.items()}
    checked = []
    for name, default in parameter_defaults(component, tmp_path).items():
        field = RENAMED.get(component.name, {}).get(name, name)
        if (component.name, name) in DELIBERATE:
            assert default == DELIBERATE[component.name, name] != fields.get(field, tracking.get(name)), name
        elif field in fields:
            assert _means(default, fields[field]), f"{name} = {default!r}, {options.__name__}: {fields[field]!r}"
        elif name in tracking:
            assert _means(default, tracking[name]), f"{name} = {default!r}, TrackingOptions: {tracking[name]!r}"
        else:
            continue
        checked.append(name)
    assert checked, f"{component.name}: no parameter is named like an option"


def _refusing_components():
    from skewgate.calibrate.component import calibrate_op
    from skewgate.compare.component import compare_op
    from skewgate.parity.component import parity_op
    from skewgate.probe.component import triton_probe_op

    return [
        pytest.param(calibrate_op, {"class_axis": "two"}, "class_axis", id="calibrate-class-axis"),
        pytest.param(calibrate_op, {"output_tasks": "logits"}, "output_tasks", id="calibrate-output-tasks"),
        pytest.param(parity_op, {"class_axis": "1.5"}, "class_axis", id="parity-class-axis"),
        pytest.param(parity_op, {"states": "h"}, "state", id="parity-states"),
        pytest.param(compare_op, {"max_churn": "five percent"}, "max_churn", id="compare-max-churn"),
        pytest.param(triton_probe_op, {"states": "h=h=next"}, "state", id="probe-states"),
    ]


@pytest.mark.parametrize(("component", "given", "field"), _refusing_components())
def test_a_parameter_that_does_not_parse_is_the_steps_recorded_error_verdict(tmp_path, mlflow_db, component, given,
                                                                             field):
    """A KFP parameter that is refused before the step's options exist fails the task as any error does (so
    promote never runs) and is recorded: the verdict artifact and the step's MLflow run say `error`, naming it."""
    import inspect

    from kfp import dsl
    from mlflow import MlflowClient

    from skewgate.common.verdict import Verdict

    arguments: dict = {}
    parameters = inspect.signature(component.python_func).parameters
    for name, parameter in parameters.items():
        if parameter.default is inspect.Parameter.empty:  # an artifact: KFP passes it at a local path
            arguments[name] = (dsl.Metrics if name == "metrics" else dsl.Artifact)(uri=str(tmp_path / name))
    # every step records under the experiment `skewgate` here (compare under its model's name)
    arguments.update(given, tracking_uri=mlflow_db, **{"experiment" if "experiment" in parameters else "model_name":
                                                       "skewgate"})
    with pytest.raises(RuntimeError, match="could not evaluate"):
        component.python_func(**arguments)
    verdict = Verdict.read(tmp_path / "verdict")
    assert verdict.status == "error" and field in verdict.message
    client = MlflowClient(mlflow_db)
    [run] = client.search_runs([client.get_experiment_by_name("skewgate").experiment_id])
    assert run.data.tags["skewgate.status"] == "error"
    assert {k: run.data.params[k] for k in given} == given
