"""The one reader of attacker-writable documents: each bound refused just over its documented value and accepted
just under it, as an `InputError` naming the document (never a traceback, never a hang), in JSON and in YAML."""

import json
import time

import pytest

from skewgate.common.documents import MAX_DEPTH, MAX_INT_DIGITS, parse_json, parse_yaml
from skewgate.common.errors import InputError

PARSERS = [pytest.param(parse_json, id="json"), pytest.param(parse_yaml, id="yaml")]


def _nested(depth):
    return "[" * depth + "1" + "]" * depth


def _refused(parse, text, found):
    with pytest.raises(InputError, match=r"^doc\.x: expected ") as caught:
        parse(text, source="doc.x")
    assert found in caught.value.found, caught.value.found


@pytest.mark.parametrize("parse", PARSERS)
def test_nesting_up_to_the_limit_is_read_and_one_deeper_is_refused(parse):
    document = parse(_nested(MAX_DEPTH), source="doc.x")
    for _ in range(MAX_DEPTH - 1):
        (document,) = document
    assert document == [1]
    _refused(parse, _nested(MAX_DEPTH + 1), f"nesting deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("parse", PARSERS)
def test_twenty_thousand_levels_are_refused_not_a_recursion_traceback(parse):
    _refused(parse, _nested(20_000), f"nesting deeper than {MAX_DEPTH} levels")
    _refused(parse, '{"a": ' * 20_000 + "1" + "}" * 20_000, f"nesting deeper than {MAX_DEPTH} levels")


@pytest.mark.parametrize("parse", PARSERS)
@pytest.mark.parametrize("sign", ["", "-"], ids=["positive", "negative"])
def test_integers_up_to_the_digit_limit_are_read_and_one_digit_more_is_refused(parse, sign):
    longest = sign + "9" * MAX_INT_DIGITS
    assert parse(f'{{"n": {longest}}}', source="doc.x") == {"n": int(longest)}
    _refused(parse, f'{{"n": {sign}1{"0" * MAX_INT_DIGITS}}}', f"an integer of {MAX_INT_DIGITS + 1} digits")
    _refused(parse, f'{{"n": {"7" * 5000}}}', "an integer of 5000 digits")


@pytest.mark.parametrize("parse", PARSERS)
def test_a_key_given_twice_is_refused_not_the_last_one_kept(parse):
    _refused(parse, '{"alpha": 0.05, "alpha": 1e-9}', "the key 'alpha' twice")
    assert parse('{"alpha": 0.05, "beta": {"alpha": 1}}', source="doc.x") == {"alpha": 0.05, "beta": {"alpha": 1}}


def test_a_yaml_key_given_twice_in_block_style_names_its_line():
    _refused(parse_yaml, "settings:\n  parity: {}\nrequired: [export]\nsettings: {}\n",
             "the key 'settings' twice in one mapping (line 4)")


def test_billion_laughs_is_refused_at_the_first_anchor_without_expanding():
    laughs = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
    assert len(laughs) < 1024
    started = time.monotonic()
    _refused(parse_yaml, laughs, "an anchor (&a): aliases and anchors are not accepted")
    assert time.monotonic() - started < 5  # a refusal, not an expansion (which takes minutes and gigabytes)


def test_a_lone_alias_is_refused():
    _refused(parse_yaml, "a: *missing\n", "an alias")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_without_the_constants_strict_json_lacks(constant):
    _refused(parse_json, f'{{"x": {constant}}}', f"{constant}, which strict JSON does not have")


@pytest.mark.parametrize("parse", PARSERS)
def test_bytes_that_are_not_utf8_or_not_the_format_are_input_errors(parse):
    _refused(parse, b'{"a": "\xff"}', "not UTF-8")
    _refused(parse, "{\"a\": [1, 2}", "invalid")


def test_ordinary_documents_read_as_before():
    document = {"step": "parity", "checks": [{"name": "c", "value": 0.5, "passed": True}], "n": 1733, "x": None}
    assert parse_json(json.dumps(document), source="d") == document
    assert parse_yaml(json.dumps(document), source="d") == document
    assert parse_yaml("required: [export]\nallow_warn: false\nn: 1_000\n", source="d") == \
        {"required": ["export"], "allow_warn": False, "n": 1000}
