"""What KFP reads of a component: its parameters' defaults, from the compiled IR."""

from pathlib import Path

import yaml
from kfp import compiler


def parameter_defaults(component, tmp_path: Path) -> dict:
    path = tmp_path / "component.yaml"
    compiler.Compiler().compile(component, str(path))
    parameters = yaml.safe_load(path.read_text())["root"]["inputDefinitions"]["parameters"]
    return {name: spec["defaultValue"] for name, spec in parameters.items() if "defaultValue" in spec}
