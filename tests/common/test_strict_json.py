"""Strict JSON reading: every accessor takes exactly its JSON type (no `True` for 1, no `"false"` for false), an
error names the document, the field's path, what was expected and what was found, and unread fields are refused."""

import pytest

from skewgate.common.errors import InputError
from skewgate.common.strict_json import Fields

DOC = {"name": "export", "ok": True, "n": 3, "x": 0.5, "none": None, "sha": "ab" * 32, "ids": [1, 2],
       "tags": {"a": "b"}, "obj": {"inner": 1}, "rows": [{"k": "v"}], "status": "pass"}


def _fields(**changes):
    return Fields({**DOC, **changes}, source="verdict.json", where="")


def test_each_accessor_reads_its_type():
    fields = _fields()
    assert fields.string("name") == "export" and fields.boolean("ok") is True and fields.integer("n") == 3
    assert fields.optional_number("x") == 0.5 and fields.optional_number("none") is None
    assert fields.sha256("sha") == "ab" * 32 and fields.ints("ids") == [1, 2] and fields.str_map("tags") == {"a": "b"}
    assert fields.json_object("obj") == {"inner": 1} and fields.choice("status", ("pass", "fail")) == "pass"
    inner = fields.optional_object("obj")
    assert inner is not None and inner.integer("inner") == 1
    (row,) = fields.objects("rows")
    assert row.string("k") == "v"
    inner.done()
    row.done()
    fields.optional_string("name")
    fields.done()  # every field read


@pytest.mark.parametrize(
    ("key", "value", "read", "expected"),
    [
        pytest.param("n", True, "integer", "an integer", id="bool-for-int"),
        pytest.param("ok", "false", "boolean", "true or false", id="string-for-bool"),
        pytest.param("x", float("nan"), "optional_number", "a finite number or null", id="nan"),
        pytest.param("x", True, "optional_number", "a finite number or null", id="bool-for-number"),
        pytest.param("sha", "AB" * 32, "sha256", "a SHA-256 as 64 lowercase hex digits", id="uppercase-sha"),
        pytest.param("ids", [1, True], "ints", "a list of integers", id="bool-in-ints"),
        pytest.param("tags", {"a": 1}, "str_map", "an object of strings", id="int-in-str-map"),
        pytest.param("rows", {"k": "v"}, "objects", "a list of objects", id="object-for-list"),
    ],
)
def test_a_value_of_another_type_is_refused_naming_document_field_expected_and_found(key, value, read, expected):
    with pytest.raises(InputError) as caught:
        getattr(_fields(**{key: value}), read)(key)
    message = str(caught.value)
    assert "verdict.json" in message and key in message and expected in message


def test_a_choice_outside_its_choices_a_missing_field_and_a_nested_path_are_named():
    with pytest.raises(InputError, match="one of"):
        _fields(status="maybe").choice("status", ("pass", "fail"))
    with pytest.raises(InputError, match="no such field"):
        _fields().string("absent")
    (row,) = _fields(rows=[{"k": 1}]).objects("rows")
    with pytest.raises(InputError, match=r"rows\[0\]"):
        row.string("k")


def test_unread_fields_are_refused_and_a_non_object_is_not_read():
    fields = _fields()
    fields.string("name")
    with pytest.raises(InputError, match="unknown field"):
        fields.done()
    with pytest.raises(InputError, match="a JSON object"):
        Fields([1, 2], source="verdict.json", where="checks")
