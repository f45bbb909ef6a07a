"""The tool-argument schemas (agent/tools/schema.py): one table of
instances per keyword with the exact messages, one of refused schemas with
theirs, the relay example, and hypothesis properties: random instances
against random schemas only ever give a list of messages, and instances
built to satisfy a schema give none.

Hypothesis runs derandomized.
"""

from __future__ import annotations

import datetime
import math
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.tools.schema import MAX_DEPTH, SchemaError, check_schema, validate
from conftest import scaled

RELAY = {"type": "object",
         "properties": {"channel": {"type": "integer", "minimum": 1, "maximum": 8},
                        "on": {"type": "boolean"}},
         "required": ["channel", "on"], "additionalProperties": False}

SUPPORTED = ("additionalProperties, anyOf, const, default, description, enum, examples, "
             "exclusiveMaximum, exclusiveMinimum, items, maxItems, maxLength, maximum, "
             "minItems, minLength, minimum, oneOf, pattern, properties, required, title, type")
TYPE_NAMES = "array, boolean, integer, null, number, object, string"


def nested(depth: int, inner=0):
    """inner inside `depth` one-element lists."""
    for _ in range(depth):
        inner = [inner]
    return inner


def items_chain(depth: int) -> dict:
    """A schema with `depth` levels of items below it."""
    schema: dict = {}
    for _ in range(depth):
        schema = {"items": schema}
    return schema


def wrap(fragment: dict) -> dict:
    """A root schema with the fragment as the schema of property v."""
    return {"type": "object", "properties": {"v": fragment}}


V = "arguments.v"

# (schema of property v, its value, the messages)
CASES = [
    # type
    ({"type": "boolean"}, True, []),
    ({"type": "boolean"}, 1, [f"{V}: expected a boolean, got an integer"]),
    ({"type": "integer"}, 3, []),
    ({"type": "integer"}, 3.0, []),  # JSON Schema: 1.0 is an integer
    ({"type": "integer"}, -2 ** 80, []),
    ({"type": "integer"}, 3.5, [f"{V}: expected an integer, got a number"]),
    ({"type": "integer"}, True, [f"{V}: expected an integer, got a boolean"]),
    ({"type": "number"}, 0.5, []),
    ({"type": "number"}, 7, []),
    ({"type": "number"}, False, [f"{V}: expected a number, got a boolean"]),
    ({"type": "string"}, "", []),
    ({"type": "string"}, None, [f"{V}: expected a string, got null"]),
    ({"type": "null"}, None, []),
    ({"type": "null"}, "null", [f"{V}: expected null, got a string"]),
    ({"type": "array"}, [], []),
    ({"type": "array"}, {}, [f"{V}: expected an array, got an object"]),
    ({"type": "object"}, {}, []),
    ({"type": "object"}, [], [f"{V}: expected an object, got an array"]),
    ({"type": ["string", "null"]}, None, []),
    ({"type": ["string", "null"]}, 0, [f"{V}: expected a string or null, got an integer"]),
    # a wrong type is the one message: the other keywords would repeat it
    ({"type": "string", "minLength": 5, "enum": ["hello"]}, 3,
     [f"{V}: expected a string, got an integer"]),
    # const and enum compare as JSON
    ({"const": 1}, 1.0, []),
    ({"const": 1}, True, [f"{V}: expected 1, got true"]),
    ({"const": None}, False, [f"{V}: expected null, got false"]),
    ({"const": {"a": [1, 2]}}, {"a": [1, 2.0]}, []),
    ({"const": {"a": [1, 2]}}, {"a": [1, 2], "b": 0},
     [f'{V}: expected {{"a": [1, 2]}}, got {{"a": [1, 2], "b": 0}}']),
    ({"const": [1, 2]}, [2, 1], [f"{V}: expected [1, 2], got [2, 1]"]),
    ({"enum": ["a", "b"]}, "b", []),
    ({"enum": ["a", "b"]}, "c", [f'{V}: "c" is not one of ["a", "b"]']),
    ({"enum": [0, "0"]}, 0.0, []),
    ({"enum": [0]}, False, [f"{V}: false is not one of [0]"]),
    ({"enum": [[1], {"k": None}]}, {"k": None}, []),
    ({"enum": [{"k": None}]}, {"j": None}, [f'{V}: {{"j": null}} is not one of [{{"k": null}}]']),
    # numbers
    ({"minimum": 1}, 1, []),
    ({"minimum": 1}, 0, [f"{V}: 0 is less than the minimum 1"]),
    ({"minimum": 1}, 0.5, [f"{V}: 0.5 is less than the minimum 1"]),
    ({"maximum": 8}, 8.0, []),
    ({"maximum": 8}, 8.5, [f"{V}: 8.5 is greater than the maximum 8"]),
    ({"exclusiveMinimum": 0}, 0.001, []),
    ({"exclusiveMinimum": 0}, 0, [f"{V}: 0 is not greater than the exclusive minimum 0"]),
    ({"exclusiveMaximum": 1.5}, 1, []),
    ({"exclusiveMaximum": 1.5}, 1.5,
     [f"{V}: 1.5 is not less than the exclusive maximum 1.5"]),
    ({"minimum": 5, "maximum": 1.5e300}, "x", []),  # bounds are for numbers only
    # big integers compare exactly (as floats these two would be equal)
    ({"maximum": 2 ** 63}, 2 ** 63 + 1,
     [f"{V}: 9223372036854775809 is greater than the maximum 9223372036854775808"]),
    ({"maximum": 8}, 10 ** 100, [f"{V}: <333-bit integer> is greater than the maximum 8"]),
    ({"minimum": 0}, -10 ** 5000, [f"{V}: -<16610-bit integer> is less than the minimum 0"]),
    # strings: lengths in code points
    ({"minLength": 2}, "ab", []),
    ({"minLength": 2}, "a", [f"{V}: has 1 character, fewer than the minimum 2"]),
    ({"maxLength": 3}, "日本語", []),
    ({"maxLength": 3}, "日本語!", [f"{V}: has 4 characters, more than the maximum 3"]),
    ({"maxLength": 0}, "", []),
    ({"maxLength": 3}, "x" * 1000, [f"{V}: has 1000 characters, more than the maximum 3"]),
    ({"minLength": 1, "maxLength": 2}, 12345, []),  # for strings only
    # patterns: re.search, close to ECMA-262
    ({"pattern": "^[a-z]+$"}, "relay", []),
    ({"pattern": "^[a-z]+$"}, "Relay", [f'{V}: "Relay" does not match the pattern "^[a-z]+$"']),
    # Python's own `$` would match before the newline.
    ({"pattern": "^[a-z]+$"}, "relay\n",
     [f'{V}: "relay\\n" does not match the pattern "^[a-z]+$"']),
    ({"pattern": "b"}, "abc", []),
    ({"pattern": r"^\d+$"}, "12", []),
    ({"pattern": r"^\d+$"}, "١٢", [f'{V}: "١٢" does not match the pattern "^\\\\d+$"']),
    ({"pattern": r"^[$]\d$"}, "$5", []),
    ({"pattern": r"^a\$$"}, "a$", []),
    ({"pattern": r"^[]$]+$"}, "]$]", []),
    ({"pattern": "x"}, 5, []),
    # arrays
    ({"minItems": 1}, [0], []),
    ({"minItems": 1}, [], [f"{V}: has 0 items, fewer than the minimum 1"]),
    ({"maxItems": 2}, [1, 2, 3], [f"{V}: has 3 items, more than the maximum 2"]),
    ({"items": {"type": "integer"}}, [1, "x", 3, None],
     [f"{V}[1]: expected an integer, got a string", f"{V}[3]: expected an integer, got null"]),
    ({"items": {"items": {"minimum": 0}}}, [[0], [1, -1]], [f"{V}[1][1]: -1 is less than the minimum 0"]),
    # objects
    ({"properties": {"a b": {"type": "string"}}, "required": ["a b"]}, {},
     [f"{V}: missing required property 'a b'"]),
    ({"properties": {"a b": {"type": "string"}}}, {"a b": 1},
     [f'{V}["a b"]: expected a string, got an integer']),
    ({"properties": {"a": {}}, "additionalProperties": False}, {"a": 1, "b": 2},
     [f"{V}: unexpected property 'b'"]),
    ({"additionalProperties": {"type": "integer"}}, {"x": 1, "y": "2"},
     [f"{V}.y: expected an integer, got a string"]),
    ({"additionalProperties": False}, {"k" * 100: 1},
     [f"{V}: unexpected property '{'k' * 39}…'"]),
    ({"properties": {"a": {}}, "required": ["a"]}, "not an object", []),
    # anyOf, oneOf
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, None, []),
    ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "x",
     [f"{V}: matches none of the anyOf alternatives "
      "(1: expected an integer, got a string; 2: expected null, got a string)"]),
    ({"anyOf": [{"properties": {"n": {"type": "integer"}}}]}, {"n": "x"},
     [f"{V}: matches none of the anyOf alternatives "
      f"(1: {V}.n: expected an integer, got a string)"]),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1.5, []),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1,
     [f"{V}: matches oneOf alternatives 1, 2, expected exactly one"]),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, None,
     [f"{V}: matches none of the oneOf alternatives "
      "(1: expected an integer, got null; 2: expected a string, got null)"]),
    # annotations are not validated
    ({"type": "string", "description": "d", "title": "t", "default": 5, "examples": [1]}, "y", []),
    # shown values are cut at 40 characters, however big or deep
    ({"enum": ["a"]}, "x" * 1000, [f'{V}: "{"x" * 38}… is not one of ["a"]']),
    ({"enum": [1]}, nested(100_000), [f"{V}: {'[' * 39}… is not one of [1]"]),
    ({"const": "a"}, {"k": "x" * 10 ** 6}, [f'{V}: expected "a", got {{"k": "{"x" * 32}…']),
]


def case_ids(cases) -> list[str]:
    """The keywords of each case's schema: values make poor ids (a huge int
    cannot even be made a string)."""
    return ["+".join(case[0]) or "empty" for case in cases]


@pytest.mark.parametrize("fragment,value,expected", CASES, ids=case_ids(CASES))
def test_keywords(fragment, value, expected):
    schema = wrap(fragment)
    check_schema(schema)
    assert validate({"v": value}, schema) == expected


def test_relay_example():
    check_schema(RELAY)
    assert validate({"channel": 3, "on": True}, RELAY) == []
    assert validate({"channel": 8.0, "on": False}, RELAY) == []
    assert validate({"channel": 9, "on": True}, RELAY) == [
        "arguments.channel: 9 is greater than the maximum 8"]
    assert validate({"channel": 1}, RELAY) == ["arguments: missing required property 'on'"]
    assert validate({"channel": 1, "on": "yes"}, RELAY) == [
        "arguments.on: expected a boolean, got a string"]
    # every problem, not just the first: required first, then in the instance's order
    assert validate({"on": 1, "channel": 0, "delay": 5}, RELAY) == [
        "arguments.on: expected a boolean, got an integer",
        "arguments.channel: 0 is less than the minimum 1",
        "arguments: unexpected property 'delay'"]
    assert validate({"channel": 1.5, "state": "on"}, RELAY) == [
        "arguments: missing required property 'on'",
        "arguments.channel: expected an integer, got a number",
        "arguments: unexpected property 'state'"]


def test_frozen_config_schemas():
    """The config may hand its tables over as read-only mappings."""
    schema = MappingProxyType({**RELAY, "properties": MappingProxyType(RELAY["properties"])})
    check_schema(schema)
    assert validate({"channel": 0, "on": True}, schema) == [
        "arguments.channel: 0 is less than the minimum 1"]
    check_schema(wrap({"const": MappingProxyType({"a": 1})}))
    assert validate({"v": {"a": 1.0}}, wrap({"const": MappingProxyType({"a": 1})})) == []


A = "#/properties/a"

# (a whole schema, the message)
REFUSED_ROOTS = [
    ([], "#: expected a schema (an object), got an array"),
    ({"type": "string"},
     '#: the root must have "type": "object" (tool arguments are an object), got "string"'),
    ({"properties": {}},
     '#: the root must have "type": "object" (tool arguments are an object), got null'),
    ({"type": ["object", "null"]},
     '#: the root must have "type": "object" (tool arguments are an object), '
     'got ["object", "null"]'),
    ({"type": "object", "foo": 1}, f"#: unknown keyword 'foo'; supported: {SUPPORTED}"),
    ({"type": "object", "properties": []}, "#/properties: expected an object of schemas, got an array"),
    ({"type": "object", "required": ["a"]}, "#/required: 'a' is not declared in properties"),
    ({"type": "object", "properties": {"a": {}}, "required": "a"},
     '#/required: expected an array of strings, got "a"'),
    ({"type": "object", "properties": {"a": {}}, "required": ["a", 1]},
     '#/required: expected an array of strings, got ["a", 1]'),
    ({"type": "object", "properties": {"a": {}}, "required": ["a", "a"]},
     "#/required: a property is listed twice"),
    ({"type": "object", "additionalProperties": "no"},
     "#/additionalProperties: expected a schema (an object), got a string"),
    ({"type": "object", "properties": {"a/b~c": {"type": "int"}}},
     f'#/properties/a~1b~0c/type: unknown type "int"; supported: {TYPE_NAMES}'),
    ({"type": "object", "properties": {1: {}}}, "#/properties: property names must be strings, got 1"),
    ({"type": "object", "properties": {"a": True}},
     f"{A}: expected a schema (an object), got a boolean"),
]

# (schema of property a, the message)
REFUSED = [
    ({"format": "date"}, f"{A}: unknown keyword 'format'; supported: {SUPPORTED}"),
    ({"$ref": "#/$defs/x"}, f"{A}: unknown keyword '$ref'; supported: {SUPPORTED}"),
    ({"type": "int"}, f'{A}/type: unknown type "int"; supported: {TYPE_NAMES}'),
    ({"type": [["string"]]}, f'{A}/type: unknown type ["string"]; supported: {TYPE_NAMES}'),
    ({"type": []}, f"{A}/type: expected a type name or a non-empty array of them, got an array"),
    ({"type": 5}, f"{A}/type: expected a type name or a non-empty array of them, got an integer"),
    ({"type": ["string", "string"]}, f"{A}/type: a type is listed twice"),
    ({"items": [{}]}, f"{A}/items: expected one schema for every item (the tuple form is not supported)"),
    ({"items": {"type": "x"}}, f'{A}/items/type: unknown type "x"; supported: {TYPE_NAMES}'),
    ({"minItems": -1}, f"{A}/minItems: expected a non-negative integer, got -1"),
    ({"maxLength": 1.5}, f"{A}/maxLength: expected a non-negative integer, got 1.5"),
    ({"maxLength": True}, f"{A}/maxLength: expected a non-negative integer, got true"),
    ({"maxLength": "3"}, f'{A}/maxLength: expected a non-negative integer, got "3"'),
    ({"minItems": 3, "maxItems": 2}, f"{A}: minItems 3 is greater than maxItems 2"),
    ({"minLength": 3, "maxLength": 2}, f"{A}: minLength 3 is greater than maxLength 2"),
    ({"enum": []}, f"{A}/enum: expected a non-empty array, got []"),
    ({"enum": "a"}, f'{A}/enum: expected a non-empty array, got "a"'),
    ({"enum": [1, math.nan]}, f"{A}/enum/1: not a JSON value: NaN"),
    ({"const": datetime.date(2024, 1, 1)}, f"{A}/const: not a JSON value: <date>"),
    ({"const": (1, 2)}, f"{A}/const: not a JSON value: <tuple>"),
    ({"default": {"x": {1: 2}}}, f"{A}/default/x: object keys must be strings, got 1"),
    ({"examples": "x"}, f"{A}/examples: expected an array, got a string"),
    ({"examples": [[math.inf]]}, f"{A}/examples/0/0: not a JSON value: Infinity"),
    ({"minimum": "1"}, f'{A}/minimum: expected a finite number, got "1"'),
    ({"maximum": math.inf}, f"{A}/maximum: expected a finite number, got Infinity"),
    ({"exclusiveMinimum": True},  # the draft 4 form
     f"{A}/exclusiveMinimum: expected a finite number, got true"),
    ({"minimum": 9, "maximum": 8}, f"{A}: no number satisfies both minimum 9 and maximum 8"),
    ({"exclusiveMinimum": 1, "maximum": 1},
     f"{A}: no number satisfies both exclusiveMinimum 1 and maximum 1"),
    ({"minimum": 1, "exclusiveMaximum": 1},
     f"{A}: no number satisfies both minimum 1 and exclusiveMaximum 1"),
    ({"exclusiveMinimum": 2.5, "exclusiveMaximum": 2},
     f"{A}: no number satisfies both exclusiveMinimum 2.5 and exclusiveMaximum 2"),
    ({"pattern": "("},
     f"{A}/pattern: not a valid regular expression: missing ), unterminated subpattern at position 0"),
    ({"pattern": "(?<n>x)"},  # ECMA's named group
     f"{A}/pattern: not a valid regular expression: unknown extension ?<n at position 1"),
    ({"pattern": 5}, f"{A}/pattern: expected a string, got an integer"),
    ({"description": 5}, f"{A}/description: expected a string, got an integer"),
    ({"title": None}, f"{A}/title: expected a string, got null"),
    ({"anyOf": []}, f"{A}/anyOf: expected a non-empty array of schemas, got []"),
    ({"anyOf": {"type": "string"}},
     f'{A}/anyOf: expected a non-empty array of schemas, got {{"type": "string"}}'),
    ({"oneOf": [{}, {"type": "x"}]}, f'{A}/oneOf/1/type: unknown type "x"; supported: {TYPE_NAMES}'),
    # depth: the root is level 0, property a level 1, each items one more
    (items_chain(MAX_DEPTH), f"{A}{'/items' * MAX_DEPTH}: schemas nested deeper than 32 levels"),
    ({"const": nested(MAX_DEPTH + 1)},
     f"{A}/const{'/0' * (MAX_DEPTH + 1)}: values nested deeper than 32 levels"),
]


@pytest.mark.parametrize("schema,expected", REFUSED_ROOTS + [
    ({"type": "object", "properties": {"a": fragment}}, expected)
    for fragment, expected in REFUSED])
def test_refused(schema, expected):
    with pytest.raises(SchemaError) as caught:
        check_schema(schema)
    assert str(caught.value) == expected
    assert expected.startswith(caught.value.pointer + ": ")


@pytest.mark.parametrize("fragment,value", [
    (items_chain(MAX_DEPTH - 1), nested(MAX_DEPTH - 1)),
    ({"const": nested(MAX_DEPTH)}, nested(MAX_DEPTH)),
    ({"minLength": 2.0, "maxLength": 2}, "ab"),  # JSON Schema: 2.0 is an integer
    ({"minimum": 1, "maximum": 1}, 1),
    ({"exclusiveMinimum": 1, "maximum": 1.5}, 1.5),
    ({"type": ["integer", "string", "null"]}, None),
    ({"enum": [None, {"a": [True]}]}, {"a": [True]}),
], ids=["depth", "value-depth", "integral-float", "min=max", "exclusive", "types", "enum"])
def test_accepted_at_the_limits(fragment, value):
    schema = wrap(fragment)
    check_schema(schema)
    assert validate({"v": value}, schema) == []


def test_cyclic_schema_is_refused():
    schema: dict = {"type": "object"}
    schema["properties"] = {"self": schema}
    with pytest.raises(SchemaError, match="schemas nested deeper than 32 levels"):
        check_schema(schema)


# ---------------------------------------------------------------------------
# hypothesis: a schema generator that also gives a strategy for instances
# that satisfy each schema it makes
# ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10)
names = st.sampled_from(["a", "b", "on", "channel", "a b", "x.y", ""])
# (pattern, strings it matches): re.search, so unanchored ones match inside
PATTERNS = [("^[a-z0-9_]{1,8}$", st.from_regex("[a-z0-9_]{1,8}", fullmatch=True)),
            (r"\d", st.from_regex("[0-9]")),
            ("^on|off$", st.sampled_from(["on", "on\n", "online", "off", "\noff"]))]
LEAF_KINDS = ["boolean", "null", "integer", "number", "string", "enum", "const", "untyped"]
# oneOf alternatives of these types never overlap
DISJOINT_KINDS = ["boolean", "null", "string", "integer", "array", "object"]


def bounds(draw, low, high) -> dict:
    """Bounds that admit every number from low to high, in one of the forms."""
    form = draw(st.sampled_from(["none", "inclusive", "exclusive", "low", "high"]))
    return {"none": {}, "inclusive": {"minimum": low, "maximum": high},
            "exclusive": {"exclusiveMinimum": low - 1, "exclusiveMaximum": high + 1},
            "low": {"minimum": low}, "high": {"exclusiveMaximum": high + 1}}[form]


@st.composite
def typed(draw, kind: str, depth: int):
    """(a schema of this kind, a strategy for instances it accepts)"""
    if kind == "boolean":
        return {"type": "boolean"}, st.booleans()
    if kind == "null":
        return {"type": "null"}, st.none()
    if kind == "integer":
        low = draw(st.integers(-2 ** 70, 2 ** 70))
        high = low + draw(st.integers(0, 1000))
        ints = st.integers(low, high)
        # 1.0 is an integer too; below 2**53 the float is the same number
        return ({"type": "integer", **bounds(draw, low, high)},
                ints | ints.filter(lambda n: abs(n) < 2 ** 53).map(float))
    if kind == "number":
        low = draw(st.floats(-1e6, 1e6))
        high = low + draw(st.floats(0, 1e3))
        numbers = st.floats(low, high)
        if math.ceil(low) <= math.floor(high):
            numbers |= st.integers(math.ceil(low), math.floor(high))
        return {"type": "number", **bounds(draw, low, high)}, numbers
    if kind == "string":
        if draw(st.booleans()):
            pattern, texts = draw(st.sampled_from(PATTERNS))
            return {"type": "string", "pattern": pattern}, texts
        low = draw(st.integers(0, 3))
        high = low + draw(st.integers(0, 6))
        return {"type": "string", "minLength": low, "maxLength": high}, st.text(min_size=low, max_size=high)
    if kind == "array":
        item, items = draw(schemas(depth + 1))
        low = draw(st.integers(0, 2))
        high = low + draw(st.integers(0, 3))
        return ({"type": "array", "items": item, "minItems": low, "maxItems": high},
                st.lists(items, min_size=low, max_size=high))
    assert kind == "object"
    declared = draw(st.lists(names, unique=True, max_size=3))
    properties = {name: draw(schemas(depth + 1)) for name in declared}
    required = draw(st.lists(st.sampled_from(declared), unique=True)) if declared else []
    schema = {"type": "object", "properties": {name: s for name, (s, _) in properties.items()},
              "required": required}
    extra = draw(st.sampled_from(["absent", True, False, "schema"]))
    if extra == "schema":
        schema["additionalProperties"], extras = draw(schemas(depth + 1))
    elif extra is False:
        schema["additionalProperties"], extras = False, st.nothing()
    else:
        if extra is True:
            schema["additionalProperties"] = True
        extras = json_values
    fixed = st.fixed_dictionaries(
        {name: properties[name][1] for name in required},
        optional={name: values for name, (_, values) in properties.items() if name not in required})
    others = st.dictionaries(st.text(max_size=4).filter(lambda k: k not in properties), extras,
                             max_size=2)
    return schema, st.tuples(fixed, others).map(lambda both: {**both[1], **both[0]})


@st.composite
def schemas(draw, depth: int = 0):
    """(a schema, a strategy for instances it accepts), nested at most 3 deep."""
    kinds = LEAF_KINDS if depth >= 3 else LEAF_KINDS + ["array", "object", "anyOf", "oneOf"]
    kind = draw(st.sampled_from(kinds))
    if kind == "enum":
        options = draw(st.lists(json_values, min_size=1, max_size=4))
        schema, values = {"enum": options}, st.sampled_from(options)
    elif kind == "const":
        value = draw(json_values)
        schema, values = {"const": value}, st.just(value)
    elif kind == "untyped":
        # each keyword applies to its own type only
        schema = {"minimum": 0, "maxLength": 3, "minItems": 1, "required": []}
        values = (st.integers(0, 100) | st.text(max_size=3) | st.booleans() | st.none()
                  | st.lists(json_values, min_size=1, max_size=3))
    elif kind == "anyOf":
        alternatives = draw(st.lists(schemas(depth + 1), min_size=1, max_size=3))
        schema = {"anyOf": [s for s, _ in alternatives]}
        values = st.one_of([v for _, v in alternatives])
    elif kind == "oneOf":
        chosen = draw(st.lists(st.sampled_from(DISJOINT_KINDS), unique=True, min_size=1, max_size=3))
        alternatives = [draw(typed(k, depth + 1)) for k in chosen]
        schema = {"oneOf": [s for s, _ in alternatives]}
        values = st.one_of([v for _, v in alternatives])
    else:
        schema, values = draw(typed(kind, depth))
    if draw(st.booleans()):  # annotations change nothing
        schema = {**schema, "description": "d", "default": draw(json_values)}
    return schema, values


roots = typed("object", 0)
HYPOTHESIS = dict(deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=scaled(200), **HYPOTHESIS)
@given(root=roots, data=st.data())
def test_instances_built_to_satisfy_validate_clean(root, data):
    schema, instances = root
    check_schema(schema)
    instance = data.draw(instances)
    assert validate(instance, schema) == []
    # and each required property is missed when it is gone
    for name in schema["required"]:
        rest = {k: v for k, v in instance.items() if k != name}
        assert f"arguments: missing required property {name!r}" in validate(rest, schema)


def mutate(value, data):
    """The value with one part, or the whole, replaced by random JSON."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(list(value)))
        return {**value, key: mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        index = data.draw(st.integers(0, len(value) - 1))
        return value[:index] + [mutate(value[index], data)] + value[index + 1:]
    return data.draw(json_values)


@settings(max_examples=scaled(200), **HYPOTHESIS)
@given(root=roots, data=st.data())
def test_random_instances_give_messages(root, data):
    """Random JSON, and valid instances with a part replaced (near misses),
    never raise: they give a list of "arguments...: ..." messages."""
    schema, instances = root
    for instance in (data.draw(json_values), data.draw(st.dictionaries(names, json_values)),
                     mutate(data.draw(instances), data)):
        problems = validate(instance, schema)
        assert isinstance(problems, list)
        assert all(isinstance(p, str) and p.startswith("arguments") and ": " in p
                   for p in problems)
