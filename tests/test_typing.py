"""`make lint`'s mypy sees real types across modules: `skewgate` resolves as plain folders (components/ is the
src root), so a wrong argument to another module's function is an error, not an `Any` passing through."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mypy(tmp_path, source):
    module = tmp_path / "cross_module_call.py"
    module.write_text(source)
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                             "--cache-dir", str(ROOT / ".mypy_cache"), str(module)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    return result.returncode, result.stdout


def test_a_type_error_in_a_cross_module_call_fails_and_a_correct_call_passes(tmp_path):
    correct = ("from skewgate.common.verdict import Check, Verdict\n"
               "verdict = Verdict.from_checks('export', [Check('c', passed=True)], subject=None)\n"
               "reveal_type(verdict.status)\n")
    code, out = _mypy(tmp_path, correct)
    assert code == 0 and "Literal['pass'] | Literal['warn']" in out, out  # not Any
    code, out = _mypy(tmp_path, correct.replace("passed=True", "passed='yes'"))
    assert code == 1 and 'Argument "passed" to "Check" has incompatible type "str"; expected "bool"' in out, out
