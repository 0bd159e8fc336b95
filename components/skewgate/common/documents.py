"""One parser for every document an attacker can write: policies, `MLmodel` files, verdicts, envelopes and their
statements, series states. Bytes are bounded by the caller (`io.read_regular_file`); here the shape is:

- nesting at most `MAX_DEPTH` levels (a 20,000-deep list otherwise ends in a `RecursionError` traceback);
- integers of at most `MAX_INT_DIGITS` digits (a 5,000-digit one otherwise ends in Python's own `ValueError`,
  and a 4,000-digit one costs quadratic time to convert);
- no duplicate keys (JSON and YAML parsers otherwise keep the last value without a word);
- YAML: no anchors or aliases at all (a 1 KB "billion laughs" expands to gigabytes), the safe loader's types only;
- JSON: no `NaN`/`Infinity`, which strict JSON does not have.

Each violation is an `InputError` naming the document, the limit and what was found: never a traceback or a hang.
Callers that judge stored evidence turn it into a refusal; callers reading their own input exit 2.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from skewgate.common.errors import InputError

MAX_DEPTH = 64  # the deepest any document skewgate writes nests is about 8
MAX_INT_DIGITS = 32  # the longest integer skewgate writes is a millisecond timestamp (13 digits)


class _Refused(ValueError):
    """Raised inside a parser's hooks; becomes the `InputError` that names the document."""


def parse_json(text: str | bytes, *, source: str, expected: str = "a JSON document") -> Any:
    """`text` as JSON within this module's limits."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        document = json.loads(text, object_pairs_hook=_unique_object, parse_int=_bounded_int,
                              parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise InputError(source, expected=expected, found=f"bytes that are not UTF-8 ({err.reason})") from err
    except _Refused as err:
        raise InputError(source, expected=expected, found=str(err)) from err
    except RecursionError as err:
        raise InputError(source, expected=expected, found=f"nesting deeper than {MAX_DEPTH} levels") from err
    except json.JSONDecodeError as err:
        raise InputError(source, expected=expected, found=f"invalid JSON ({err})") from err
    _check_depth(document, source=source, expected=expected)
    return document


def parse_yaml(text: str | bytes, *, source: str, expected: str = "a YAML document") -> Any:
    """`text` as YAML (JSON is YAML too) within this module's limits: safe types only, no anchors or aliases."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        loader = _Loader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except UnicodeDecodeError as err:
        raise InputError(source, expected=expected, found=f"bytes that are not UTF-8 ({err.reason})") from err
    except _Refused as err:
        raise InputError(source, expected=expected, found=str(err)) from err
    except yaml.YAMLError as err:
        raise InputError(source, expected=expected, found=f"invalid YAML ({type(err).__name__}: "
                         f"{str(err)[:200]})") from err


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Refused(f"the key {key[:80]!r} twice in one object")
        result[key] = value
    return result


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-+"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name}, which strict JSON does not have")


def _check_depth(document: Any, *, source: str, expected: str) -> None:
    """Iterative, so that the check itself never recurses."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_DEPTH:
                raise InputError(source, expected=expected, found=f"nesting deeper than {MAX_DEPTH} levels")
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


class _Loader(yaml.SafeLoader):
    """The safe loader, refusing anchors, aliases, deep nesting, long integers and duplicate keys. Depth is counted
    while composing, before PyYAML's own recursion could run out of stack."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"an alias (*{event.anchor}): aliases and anchors are not accepted")
        if getattr(event, "anchor", None):
            raise _Refused(f"an anchor (&{event.anchor}): aliases and anchors are not accepted")
        collection = isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent)
        self._depth += collection
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nesting deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= collection

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base class says so with the position
                break
            if duplicate:
                raise _Refused(f"the key {str(key)[:80]!r} twice in one mapping (line {key_node.start_mark.line + 1})")
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: Any) -> int:
        digits = len(str(node.value).lstrip("-+").replace("_", ""))
        if digits > MAX_INT_DIGITS:
            raise _Refused(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
        value: int = super().construct_yaml_int(node)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
