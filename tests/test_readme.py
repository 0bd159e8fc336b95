"""The README cannot drift from the code: every `make` target it names exists, every command of its quickstart
("Gate your own model") parses with the real CLI and every variable it exports is one the code reads, the
quickstart runs as written (five commands from `torch.export` to a verified champion, on a tiny model), and its
demo output block is what a real `make demo` printed (the Makefile keeps that output in work/demo/output.txt)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = "Gate your own model"
# what `make demo` printed (the Makefile tees it there; .ci/run runs the demo before the tests)
DEMO_OUTPUT = Path(os.environ.get("SKEWGATE_DEMO_OUTPUT", ROOT / "work" / "demo" / "output.txt"))
SHELLS = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>[\w-]*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)


def section(text: str, heading: str) -> str:
    """The text under `## heading`, up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, list-item indentation removed."""
    return [(m["lang"], textwrap.dedent(m["body"])) for m in _FENCE.finditer(text)]


def commands(body: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, each split as the shell
    would."""
    joined = re.sub(r"\\\n", " ", body)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def quickstart_blocks() -> list[tuple[str, str]]:
    return code_blocks(section(README.read_text(encoding="utf-8"), QUICKSTART))


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M))


def test_every_make_target_the_readme_names_exists():
    text = README.read_text(encoding="utf-8")
    code = re.findall(r"`([^`\n]+)`", _FENCE.sub("", text)) + [body for _, body in code_blocks(text)]
    named = {target for snippet in code for target in re.findall(r"(?:^|\s)make ([a-z][\w-]*)", snippet)}
    assert {"demo", "test"} <= named
    assert named <= make_targets(), f"README names make targets the Makefile lacks: {named - make_targets()}"


def test_every_quickstart_command_parses_with_the_real_cli():
    from skewgate.cli import COMMANDS, command_parser

    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "components").rglob("*.py"))
    shell = [body for lang, body in quickstart_blocks() if lang in SHELLS]
    assert len(shell) >= 5, "the quickstart's shell blocks are gone"
    seen = []
    for argv in (argv for body in shell for argv in commands(body)):
        program = Path(argv[0]).name
        if program == "export":
            name = argv[1].split("=", 1)[0]
            assert name == "PATH" or f'"{name}"' in source, f"the README exports {name}, which nothing reads"
        elif program == "skewgate":
            command = argv[1]
            assert command in COMMANDS, f"README: `skewgate {command}` is no command"
            try:
                command_parser(command).parse_args(argv[2:])
            except SystemExit as exit_:
                pytest.fail(f"README: `{shlex.join(argv)}` does not parse (exit {exit_.code}; see stderr)")
            seen.append(command)
        elif program == "make":
            assert argv[1] in make_targets()
        elif program == "mlflow":  # the one store a local quickstart uses is made on purpose
            assert argv[1:] == ["db", "upgrade", "$MLFLOW_TRACKING_URI"]
        else:
            pytest.fail(f"README's quickstart runs {argv[0]!r}: not a skewgate or make command")
    # the five commands from torch.export to a verified champion, and the key pair before them
    assert {"keys", "export", "parity", "promote", "verify"} <= set(seen)


def test_the_quickstart_python_compiles():
    python = [body for lang, body in quickstart_blocks() if lang == "python"]
    assert python
    for body in python:
        compile(body, "README.md", "exec")


@pytest.mark.integration
def test_the_quickstart_runs_as_written(tmp_path):
    """The quickstart's setup block and its numbered steps' commands, as one bash script in an empty folder (with
    the checkout's .venv linked in, as after `make setup`), after its Python block exported a small model; every
    command must succeed, ending in a champion that `skewgate verify` passes. The block of optional steps after
    them needs data a user brings (Parquet, a Triton server): it is checked by parsing only."""
    import numpy as np
    import torch

    blocks = quickstart_blocks()
    python = next(body for lang, body in blocks if lang == "python")
    shell = [body for lang, body in blocks if lang in SHELLS]
    setup, steps = shell[0], shell[1:5]
    assert "keys generate" in setup and [commands(b)[0][1] for b in steps] == ["export", "parity", "promote",
                                                                                "verify"]
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        exec(compile(python, "README.md", "exec"), {"model": model, "x": torch.randn(32, 8), "np": np})
    finally:
        os.chdir(cwd)
    assert (tmp_path / "candidate.pt2").is_file() and (tmp_path / "examples.npz").is_file()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "SKEWGATE_"))}
    script = "set -euo pipefail\nmkdir -p verdicts\n" + "\n".join([setup, *steps])
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"the quickstart failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    assert "verify: PASS" in done.stderr, done.stderr[-4000:]


# --- the demo output block ---------------------------------------------------------------------------------------

def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+(?:[.']\w+)*", text)


def _abridges(short: str, full: str) -> bool:
    """`short` is `full` with words left out (the README's "…"): its words appear in `full`, in order."""
    words = iter(_tokens(full))
    return all(any(token == word for word in words) for token in _tokens(short))


def demo_report(text: str) -> tuple[list[tuple[str, list[tuple[str, str, str]]]], list[str]]:
    """([(title, [(step, STATUS, why)])], the lines after the last table) of the demo's output."""
    sections: list[tuple[str, list[tuple[str, str, str]]]] = []
    trailer: list[str] = []
    for line in text.splitlines():
        title = re.fullmatch(r"== (.*) ==", line.strip())
        if title:
            sections.append((title.group(1), []))
        elif sections and not trailer and line.startswith("  ") and line.strip():
            step, status, why = [*re.split(r"\s{2,}", line.strip(), maxsplit=2), "", ""][:3]
            sections[-1][1].append((step, status, why))
        elif sections and line.strip():
            trailer.append(line.strip())
    return sections, trailer


def test_the_demo_output_block_is_what_the_demo_printed():
    if not DEMO_OUTPUT.is_file():
        pytest.skip(f"no demo output at {DEMO_OUTPUT}: `make demo` writes it (.ci/run runs the demo first)")
    block = next((body for _, body in code_blocks(section(README.read_text(encoding="utf-8"), "The two commands"))
                  if body.startswith("== ")), None)
    assert block is not None, "README's demo output block (starting with '== ') is gone"
    shown, shown_trailer = demo_report(block)
    real, real_trailer = demo_report(DEMO_OUTPUT.read_text(encoding="utf-8"))
    assert [title for title, _ in shown] == [title for title, _ in real]
    for (title, rows), (_, real_rows) in zip(shown, real, strict=True):
        assert [r[:2] for r in rows] == [r[:2] for r in real_rows], f"{title}: steps or statuses differ"
        for (step, _, why), (_, _, real_why) in zip(rows, real_rows, strict=True):
            assert _abridges(why, real_why), f"{title}, {step}: README shows {why!r}, the demo printed {real_why!r}"
    remaining = iter(real_trailer)
    for line in shown_trailer:
        assert any(_abridges(line, real) for real in remaining), f"README shows {line!r}, the demo did not print it"


def test_the_demo_comparison_catches_a_wrong_count():
    real = "== a: run succeeded ==\n  step    status  why\n  parity  PASS    all 8 checks passed\n"
    assert demo_report(real)[0] == [("a: run succeeded", [("step", "status", "why"),
                                                          ("parity", "PASS", "all 8 checks passed")])]
    assert _abridges("all checks passed", "all 8 checks passed")
    assert not _abridges("all 9 checks passed", "all 8 checks passed")
    assert _abridges("BatchNorm traced in training mode (uses batch statistics): features.1…; …",
                     "BatchNorm traced in training mode (uses batch statistics): features.1, features.5; x: y")
