"""Every `--help` a user can ask for: each option says what it does, each command ends with an example, and no
default is printed as a Python repr."""

import argparse
import re

import pytest

from skewgate.cli import COMMANDS, build_parser, command_parser

REPR = re.compile(r"object at 0x|\b[A-Z]\w*\(\w+=")  # `<X object at 0x…>`, a dataclass repr like `Tolerance(rtol=`


def _walk(parser: argparse.ArgumentParser):
    """The parser, then each subcommand's parser, depth first."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                yield from _walk(sub)


def _parsers():
    yield build_parser()
    for command in COMMANDS:
        yield from _walk(command_parser(command))


PARSERS = {parser.prog: parser for parser in _parsers()}


def test_every_command_and_subcommand_is_walked():
    assert {"skewgate", "skewgate drift profile", "skewgate probe serve", "skewgate probe install",
            "skewgate keys generate", "skewgate pipeline compile"} <= set(PARSERS)
    assert {f"skewgate {command}" for command in COMMANDS} <= set(PARSERS)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_option_has_help(prog):
    parser = PARSERS[prog]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            assert all(helps.values()), f"{prog}: a subcommand without help: {helps}"
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help is not argparse.SUPPRESS, f"{prog} {name}: no help"
        text = formatter._expand_help(action)  # with %(default)s filled in, as printed
        assert text.strip() and not REPR.search(text), f"{prog} {name}: {text!r}"


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_help_ends_with_an_example_and_prints_no_repr(prog):
    text = PARSERS[prog].format_help()  # also: every help string's `%` is a valid format for argparse
    assert not REPR.search(text), text
    epilog = text.rstrip().rpartition("\nexample:\n")[2]
    assert "\nexample:\n" in text and epilog.lstrip().startswith(("skewgate ", "mlflow ")), text
    assert text.index("\nexample:\n") > text.index("options:"), "the example comes last"


def test_the_example_is_printed_as_written():
    """Examples keep their lines (and `\\` continuations) however wide the terminal: users copy them."""
    text = PARSERS["skewgate parity"].format_help()
    example = text.rpartition("example:\n")[2].splitlines()
    assert example[0].startswith("  skewgate parity --torch ") and example[0].endswith(" \\")
    assert example[1].startswith("      --layerwise")


def test_compare_threshold_defaults_read_as_the_flag_is_written():
    text = " ".join(PARSERS["skewgate compare"].format_help().split())
    assert "Defaults: accuracy:max_regression=0.005; macro_f1:max_regression=0.005; " in text
    assert "Threshold(" not in text


@pytest.mark.parametrize(("prog", "option"), [
    ("skewgate drift", "--alpha-ks"), ("skewgate drift", "--alpha-mmd"), ("skewgate drift", "--correction"),
    ("skewgate drift", "--permutations"), ("skewgate calibrate", "--batch-size"), ("skewgate parity", "--batch-size"),
    ("skewgate probe", "--protocol"), ("skewgate probe serve", "--platform"), ("skewgate keys generate", "--out"),
    ("skewgate drift profile", "--reference"), ("skewgate drift profile", "--out"),
])
def test_the_options_the_issue_named_say_what_they_do_and_their_default(prog, option):
    (action,) = [a for a in PARSERS[prog]._actions if option in a.option_strings]
    text = PARSERS[prog]._get_formatter()._expand_help(action)
    assert len(text) > 15
    if action.default is not None and not action.required:
        assert f"default: {action.default}" in text, text


def test_compile_help_names_the_image_and_how_to_set_it():
    """#36 item 4: the image was `skewgate:0.1.0` without a registry, and `compile --help` did not say so."""
    pipeline = command_parser("pipeline")
    compile_ = next(action for action in pipeline._actions if isinstance(action, argparse._SubParsersAction))
    text = " ".join(compile_.choices["compile"].format_help().split())
    assert "$SKEWGATE_IMAGE" in text and "$SKEWGATE_IMAGE_DIGEST" in text and "$SKEWGATE_GPU_IMAGE" in text
