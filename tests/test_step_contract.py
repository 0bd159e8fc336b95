"""The step contract, literally: every step folder holds the same five files (anything else lives in one
clearly named subpackage), and each component's parameter defaults are the options dataclass's defaults."""

from pathlib import Path

import pytest

import skewgate

ROOT = Path(skewgate.__file__).parent
STEPS = ("export", "calibrate", "drift", "parity", "probe", "promote", "compare", "verify", "preprocess")
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
    readme = (ROOT.parent / "README.md").read_text(encoding="utf-8")
    for step in STEPS:
        assert f"{step}/" in readme, f"the README's layout section does not name {step}/"


def test_every_package_folder_ships_in_the_wheel():
    """A subpackage missing from pyproject's `packages` works here (editable install) and breaks the image."""
    import tomllib

    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"skewgate." + ".".join(p.parent.relative_to(ROOT).parts) if p.parent != ROOT else "skewgate"
             for p in ROOT.rglob("__init__.py")}
    assert found - {"skewgate.pipelines"} <= listed, f"not in pyproject packages: {sorted(found - listed)}"
