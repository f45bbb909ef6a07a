"""Tool templates shared by the handlers: a serial device's command line
(`RELAY {channel} {on}`) and a program's argv (`["set-light", "{room}"]`).

A placeholder is a bare `{name}` among the names allowed (a tool's
parameters); `{{` and `}}` are literal braces. A value is rendered the same
everywhere: a string as it is, anything else as JSON (true/false, null,
numbers; a float with no fraction as an integer, so `2.0` is `2`).
"""

from __future__ import annotations

import json
import string
from typing import Any, Iterable, Mapping

from agent.devices.base import SettingError, ToolError

Template = tuple[tuple[str, str | None], ...]  # (literal, placeholder or None) pieces


def parse(key: str, text: str, names: Iterable[str], where: str = "") -> Template:
    """The pieces of a template; SettingError (at key) for a lone brace, a
    format spec or conversion, or a name not among `names`."""
    allowed = frozenset(names)
    try:
        pieces = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise SettingError(key, f"{where}bad template: {exc} (a literal brace is "
                           "{{ or }})") from None
    for _, name, spec, conversion in pieces:
        if name is not None and (spec or conversion or name not in allowed):
            known = ", ".join(f"{{{n}}}" for n in sorted(allowed)) or "none"
            raise SettingError(key, f"{where}placeholder {{{name}{'!' + conversion if conversion else ''}"
                               f"{':' + spec if spec else ''}}}: a placeholder is a bare name "
                               f"among {known}")
    return tuple((literal, name) for literal, name, _, _ in pieces)


def value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def leading_placeholder(template: Template, arguments: Mapping[str, Any]) -> str | None:
    """The placeholder whose value the rendered text starts with; None when
    it starts with the template's own text (or is empty)."""
    for literal, name in template:
        if literal:
            return None
        if name is not None and value_text(arguments.get(name, "")):
            return name
    return None


def render(template: Template, arguments: Mapping[str, Any]) -> str:
    """The template with the arguments; ToolError names a missing one."""
    out = []
    for literal, name in template:
        out.append(literal)
        if name is not None:
            if name not in arguments:
                raise ToolError(f"the template needs {name!r}, which was not given")
            out.append(value_text(arguments[name]))
    return "".join(out)
