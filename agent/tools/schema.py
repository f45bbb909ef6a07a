"""JSON Schema for tool arguments: check_schema() for the schemas a config
declares (run when it loads, so a bad schema stops the daemon at start) and
validate() for the arguments the model sends (run before a device sees them).

The subset tool schemas use, with draft 2020-12 meanings:
- type: a name or a list of them. "integer" is an int or a float with no
  fraction: the spec makes 1.0 an integer, and the parser gives 1.0 as a
  float. A bool is never a number or an integer.
- properties, required, additionalProperties (true, false or a schema),
  items (one schema; the tuple form is refused), minItems, maxItems.
- enum, const, compared as JSON: 1 equals 1.0, true never equals 1.
- minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, not the
  draft 4 booleans).
- minLength, maxLength in code points; pattern (see _compile()).
- anyOf, oneOf: lists of schemas.
- description, title, default, examples: annotations, not validated.
Everything else, $ref and format included, is refused by check_schema with
the list above, so a keyword is never silently ignored. Booleans stand for
schemas only in additionalProperties. The root must be "type": "object":
the providers send tool arguments as one object.

Bounds: schemas nest at most MAX_DEPTH levels, and so do enum, const,
default and example values. validate() walks the instance only where the
schema goes and compares it with enum and const values only as deep as
those go, so the schema's bound is the instance's too; values in messages
are rendered lazily and cut at 40 characters. Work is linear in schema size
times instance size.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import re
from typing import Any, Mapping

from agent.jsontypes import is_type

MAX_DEPTH = 32
ROOT = "arguments"  # how messages name the instance
_SHOWN = 40  # characters of a value in a message

_TYPES = {"object": "an object", "array": "an array", "string": "a string",
          "integer": "an integer", "number": "a number", "boolean": "a boolean",
          "null": "null"}
_NUMBERS = ("integer", "number")
_KINDS = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
          (str, "string"), (list, "array"), (Mapping, "object"))
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# (keyword, fails when (value, bound), says); a number's bounds and the counts
# of a string's characters and an array's items
_BOUNDS = (("minimum", operator.lt, "is less than the minimum"),
           ("maximum", operator.gt, "is greater than the maximum"),
           ("exclusiveMinimum", operator.le, "is not greater than the exclusive minimum"),
           ("exclusiveMaximum", operator.ge, "is not less than the exclusive maximum"))
_LENGTHS = (("minLength", operator.lt, "fewer than the minimum"),
            ("maxLength", operator.gt, "more than the maximum"))
_ITEMS = (("minItems", operator.lt, "fewer than the minimum"),
          ("maxItems", operator.gt, "more than the maximum"))


class SchemaError(ValueError):
    """A schema that check_schema() refused: pointer is where (a JSON
    pointer in fragment form, "#" for the root), problem what is wrong."""

    def __init__(self, pointer: str, problem: str) -> None:
        super().__init__(f"{pointer}: {problem}")
        self.pointer = pointer
        self.problem = problem


# ---------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------

def validate(instance: Any, schema: Mapping[str, Any]) -> list[str]:
    """Every problem of the instance against a schema that passed
    check_schema(), each "PATH: what is wrong"; [] when it is valid."""
    return _problems(instance, schema, ROOT)


def _problems(value: Any, schema: Mapping[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    _validate(value, schema, path, errors)
    return errors


def _validate(value: Any, schema: Mapping[str, Any], path: str, errors: list[str]) -> None:
    kind = _kind(value)
    if "type" in schema:
        names = schema["type"]
        names = [names] if isinstance(names, str) else names
        if not any(_is(value, kind, name) for name in names):
            expected = " or ".join(_TYPES[name] for name in names)
            errors.append(f"{path}: expected {expected}, got {_a(value)}")
            return  # the other keywords would only repeat it
    if "const" in schema and not _equal(value, schema["const"]):
        errors.append(f"{path}: expected {_show(schema['const'])}, got {_show(value)}")
    if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
        errors.append(f"{path}: {_show(value)} is not one of {_show(schema['enum'])}")
    if kind in _NUMBERS:
        for keyword, fails, says in _BOUNDS:
            if keyword in schema and fails(value, schema[keyword]):
                errors.append(f"{path}: {_show(value)} {says} {_show(schema[keyword])}")
    elif kind == "string":
        _count(len(value), "character", schema, _LENGTHS, path, errors)
        if "pattern" in schema and not _compile(schema["pattern"]).search(value):
            errors.append(f"{path}: {_show(value)} does not match the pattern "
                          f"{_show(schema['pattern'])}")
    elif kind == "array":
        _count(len(value), "item", schema, _ITEMS, path, errors)
        if "items" in schema:
            for index, item in enumerate(value):
                _validate(item, schema["items"], f"{path}[{index}]", errors)
    elif kind == "object":
        _validate_object(value, schema, path, errors)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            _validate_alternatives(value, keyword, schema[keyword], path, errors)


def _validate_object(value: Mapping, schema: Mapping[str, Any], path: str,
                     errors: list[str]) -> None:
    for name in schema.get("required", ()):
        if name not in value:
            errors.append(f"{path}: missing required property {_quote(name)}")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        sub = properties.get(name, extra)
        if sub is False:
            errors.append(f"{path}: unexpected property {_quote(name)}")
        elif sub is not True:
            _validate(item, sub, _child(path, name), errors)


def _validate_alternatives(value: Any, keyword: str, alternatives: list, path: str,
                           errors: list[str]) -> None:
    found = [_problems(value, alternative, path) for alternative in alternatives]
    matched = [str(n) for n, problems in enumerate(found, 1) if not problems]
    if not matched:
        # The first problem of each says enough; the path is the same more often than not.
        firsts = "; ".join(f"{n}: {problems[0].removeprefix(path + ': ')}"
                           for n, problems in enumerate(found, 1))
        errors.append(f"{path}: matches none of the {keyword} alternatives ({firsts})")
    elif keyword == "oneOf" and len(matched) > 1:
        errors.append(f"{path}: matches oneOf alternatives {', '.join(matched)}, "
                      "expected exactly one")


def _count(n: int, unit: str, schema: Mapping[str, Any], bounds: tuple, path: str,
           errors: list[str]) -> None:
    for keyword, fails, says in bounds:
        if keyword in schema and fails(n, schema[keyword]):
            errors.append(f"{path}: has {n} {unit}{'' if n == 1 else 's'}, "
                          f"{says} {_show(schema[keyword])}")


def _kind(value: Any) -> str | None:
    """The JSON type of a value (a float is always "number"), None if it is
    not one of the JSON types."""
    return next((kind for cls, kind in _KINDS if is_type(value, cls)), None)


def _is(value: Any, kind: str | None, name: str) -> bool:
    if name == "integer":
        return kind == "integer" or (kind == "number" and value.is_integer())
    if name == "number":
        return kind in _NUMBERS
    return kind == name


def _equal(a: Any, b: Any) -> bool:
    kind_a, kind_b = _kind(a), _kind(b)
    if kind_a in _NUMBERS and kind_b in _NUMBERS:
        return a == b
    if kind_a != kind_b or kind_a is None:
        return False
    if kind_a == "array":
        return len(a) == len(b) and all(map(_equal, a, b))
    if kind_a == "object":
        return len(a) == len(b) and all(key in b and _equal(item, b[key])
                                        for key, item in a.items())
    return a == b


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern:
    """A pattern as Python's re.search, close to ECMA-262 (the spec's
    dialect): re.ASCII makes \\d, \\w and \\b ASCII as in ECMA (\\s too, where
    ECMA also takes Unicode spaces: stricter, never looser), and an
    unescaped `$` outside a class becomes \\Z: Python's `$` also matches
    before a final newline, which would let "on\\n" through "^[a-z]+$" to a
    line-based device. Still different: `.` matches \\r, \\u2028 and \\u2029
    here; ECMA-only syntax ((?<name>...), \\cX, \\u{...}) fails to compile,
    Python-only syntax ((?P<name>...), \\A, inline flags) is accepted. re.error
    if it does not compile. Patterns come from the config, so catastrophic
    backtracking is the config's to avoid (with maxLength)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i:i + 2])
            i += 2
        elif char == "[":
            # A class is copied as is; a `]` first in it is a literal.
            j = i + 1
            j += j < n and pattern[j] == "^"
            j += j < n and pattern[j] == "]"
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i:j + 1])
            i = j + 1
        else:
            out.append(r"\Z" if char == "$" else char)
            i += 1
    return re.compile("".join(out), re.ASCII)


# ---------------------------------------------------------------------------
# messages
# ---------------------------------------------------------------------------

def _a(value: Any) -> str:
    kind = _kind(value)
    return _TYPES[kind] if kind else f"a Python {type(value).__name__}"


def _show(value: Any) -> str:
    """A value as JSON, cut at _SHOWN characters; rendered piece by piece, so
    a huge or deeply nested value costs no more than its first pieces."""
    text = ""
    for piece in _pieces(value):
        text += piece
        if len(text) > _SHOWN:
            return text[:_SHOWN - 1] + "…"
    return text


def _pieces(value: Any):
    kind = _kind(value)
    if kind == "string":
        yield json.dumps(value[:_SHOWN], ensure_ascii=False)
    elif kind == "integer":
        # str() of a long int costs quadratic time (and over 4300 digits raises).
        if abs(value) < 10 ** (_SHOWN - 1):
            yield str(value)
        else:
            yield f"{'-' if value < 0 else ''}<{value.bit_length()}-bit integer>"
    elif kind in ("number", "boolean", "null"):
        yield json.dumps(value)
    elif kind == "array":
        yield "["
        for index, item in enumerate(value):
            yield ", " if index else ""
            yield from _pieces(item)
        yield "]"
    elif kind == "object":
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield ", " if index else ""
            yield from _pieces(key)
            yield ": "
            yield from _pieces(item)
        yield "}"
    else:
        yield f"<{type(value).__name__}>"


def _quote(name: Any) -> str:
    if not isinstance(name, str):
        return _show(name)
    return repr(name if len(name) <= _SHOWN else name[:_SHOWN - 1] + "…")


def _child(path: str, name: Any) -> str:
    if isinstance(name, str) and len(name) <= _SHOWN and _IDENTIFIER.fullmatch(name):
        return f"{path}.{name}"
    return f"{path}[{_show(name)}]"


# ---------------------------------------------------------------------------
# check_schema
# ---------------------------------------------------------------------------

def check_schema(schema: Mapping[str, Any]) -> None:
    """Raise SchemaError for the first problem of a tool's schema."""
    if not isinstance(schema, Mapping):
        _fail((), f"expected a schema (an object), got {_a(schema)}")
    if schema.get("type") != "object":
        _fail((), 'the root must have "type": "object" (tool arguments are an object), '
                  f"got {_show(schema.get('type'))}")
    _check(schema, (), 0)


def _fail(at: tuple[str, ...], problem: str):
    pointer = "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in at)
    raise SchemaError("#" + pointer, problem)


def _check(schema: Any, at: tuple[str, ...], depth: int) -> None:
    if depth > MAX_DEPTH:
        _fail(at, f"schemas nested deeper than {MAX_DEPTH} levels")
    if not isinstance(schema, Mapping):
        _fail(at, f"expected a schema (an object), got {_a(schema)}")
    for keyword, value in schema.items():
        check = _CHECKS.get(keyword)
        if check is None:
            _fail(at, f"unknown keyword {_quote(keyword)}; supported: {', '.join(sorted(_CHECKS))}")
        check(value, at + (keyword,), depth)
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in properties:
            _fail(at + ("required",), f"{_quote(name)} is not declared in properties")
    for low, high in (("minItems", "maxItems"), ("minLength", "maxLength")):
        if low in schema and high in schema and schema[low] > schema[high]:
            _fail(at, f"{low} {_show(schema[low])} is greater than {high} {_show(schema[high])}")
    for low in ("minimum", "exclusiveMinimum"):
        for high in ("maximum", "exclusiveMaximum"):
            if low in schema and high in schema:
                lo, hi = schema[low], schema[high]
                exclusive = (low, high) != ("minimum", "maximum")
                if lo > hi or (exclusive and lo == hi):
                    _fail(at, f"no number satisfies both {low} {_show(lo)} and {high} {_show(hi)}")


def _check_type(value: Any, at: tuple[str, ...], depth: int) -> None:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names:
        _fail(at, f"expected a type name or a non-empty array of them, got {_a(value)}")
    for name in names:
        if not isinstance(name, str) or name not in _TYPES:
            _fail(at, f"unknown type {_show(name)}; supported: {', '.join(sorted(_TYPES))}")
    if len(set(names)) != len(names):
        _fail(at, "a type is listed twice")


def _check_properties(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, Mapping):
        _fail(at, f"expected an object of schemas, got {_a(value)}")
    for name, sub in value.items():
        if not isinstance(name, str):
            _fail(at, f"property names must be strings, got {_show(name)}")
        _check(sub, at + (name,), depth + 1)


def _check_required(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        _fail(at, f"expected an array of strings, got {_show(value)}")
    if len(set(value)) != len(value):
        _fail(at, "a property is listed twice")


def _check_additional(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, bool):
        _check(value, at, depth + 1)


def _check_items(value: Any, at: tuple[str, ...], depth: int) -> None:
    if isinstance(value, list):
        _fail(at, "expected one schema for every item (the tuple form is not supported)")
    _check(value, at, depth + 1)


def _check_alternatives(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, list) or not value:
        _fail(at, f"expected a non-empty array of schemas, got {_show(value)}")
    for index, sub in enumerate(value):
        _check(sub, at + (str(index),), depth + 1)


def _check_count(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not _is(value, _kind(value), "integer") or value < 0:
        _fail(at, f"expected a non-negative integer, got {_show(value)}")


def _check_number(value: Any, at: tuple[str, ...], depth: int) -> None:
    if _kind(value) not in _NUMBERS or not math.isfinite(value):
        _fail(at, f"expected a finite number, got {_show(value)}")


def _check_pattern(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, str):
        _fail(at, f"expected a string, got {_a(value)}")
    try:
        _compile(value)
    except re.error as error:
        _fail(at, f"not a valid regular expression: {error}")


def _check_text(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, str):
        _fail(at, f"expected a string, got {_a(value)}")


def _check_enum(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, list) or not value:
        _fail(at, f"expected a non-empty array, got {_show(value)}")
    _check_value(value, at, 0)


def _check_json(value: Any, at: tuple[str, ...], depth: int) -> None:
    _check_value(value, at, 0)


def _check_examples(value: Any, at: tuple[str, ...], depth: int) -> None:
    if not isinstance(value, list):
        _fail(at, f"expected an array, got {_a(value)}")
    _check_value(value, at, 0)


def _check_value(value: Any, at: tuple[str, ...], depth: int) -> None:
    """A JSON value (it is sent to the provider), nested at most MAX_DEPTH
    levels (enum and const values are compared recursively)."""
    if depth > MAX_DEPTH:
        _fail(at, f"values nested deeper than {MAX_DEPTH} levels")
    kind = _kind(value)
    if kind is None or (kind == "number" and not math.isfinite(value)):
        _fail(at, f"not a JSON value: {_show(value)}")
    if kind == "array":
        for index, item in enumerate(value):
            _check_value(item, at + (str(index),), depth + 1)
    elif kind == "object":
        for key, item in value.items():
            if not isinstance(key, str):
                _fail(at, f"object keys must be strings, got {_show(key)}")
            _check_value(item, at + (key,), depth + 1)


_CHECKS = {
    "type": _check_type,
    "properties": _check_properties,
    "required": _check_required,
    "additionalProperties": _check_additional,
    "items": _check_items,
    "minItems": _check_count,
    "maxItems": _check_count,
    "minLength": _check_count,
    "maxLength": _check_count,
    "enum": _check_enum,
    "const": _check_json,
    "minimum": _check_number,
    "maximum": _check_number,
    "exclusiveMinimum": _check_number,
    "exclusiveMaximum": _check_number,
    "pattern": _check_pattern,
    "anyOf": _check_alternatives,
    "oneOf": _check_alternatives,
    "description": _check_text,
    "title": _check_text,
    "default": _check_json,
    "examples": _check_examples,
}
