"""Tool templates shared by the handlers: a serial device's command line
(`RELAY {channel} {on}`) and a program's argv (`["set-light", "{room}"]`,
Argv: a command device's programs and its tools, a speech sink's program).

A placeholder is a bare `{name}` among the names allowed (a tool's
parameters); `{{` and `}}` are literal braces. A value is rendered the same
everywhere: a string as it is, anything else as JSON (true/false, null,
numbers; a float with no fraction as an integer, so `2.0` is `2`).
"""

from __future__ import annotations

import json
import os
import shutil
import string
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from agent.settings.errors import SettingError
from agent.tools.base import ToolError

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


END_OF_OPTIONS = "--"


def _argument(value: str) -> str:
    """`value` as argv can carry it: a C string ends at NUL, and a lone
    surrogate cannot be encoded. Dropped or replaced, so that such a text
    still runs instead of failing the device."""
    return value.replace("\0", "").encode("utf-8", "replace").decode("utf-8")


class OptionRefused(ToolError):
    """A placeholder's value that would start an argument with `-`."""

    def __init__(self, program: str, name: str, argument: str) -> None:
        shown = argument if len(argument) <= 40 else argument[:40] + "..."
        super().__init__(f"nothing was run: the value of {{{name}}}, {shown!r}, starts "
                         f"with '-' and {program} would read it as an option")


@dataclass(frozen=True, slots=True)
class Argv:
    """A checked argv template."""
    program: str        # as configured, for reports
    path: str           # resolved when the config loads
    args: tuple[Template, ...]  # the arguments after the program
    options_end: int    # index in args of the template's own `--`, or len(args)

    def render(self, values: Mapping[str, Any], allow_dash: frozenset[str]) -> list[str]:
        """Raises ToolError naming a placeholder without a value, OptionRefused
        for a value that would be an option."""
        argv = [self.path]
        for index, template in enumerate(self.args):
            argument = _argument(render(template, values))
            name = leading_placeholder(template, values)
            if argument.startswith("-") and index < self.options_end \
                    and name is not None and name not in allow_dash:
                raise OptionRefused(self.program, name, argument)
            argv.append(argument)
        return argv


def parse_argv(key: str, argv: Any, names: frozenset[str]) -> Argv:
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise SettingError(key, "must be a non-empty list of strings: the program and "
                                "its arguments")
    if any(name is not None for _, name in parse(key, argv[0], ())):
        raise SettingError(key, "the program (argument 0) cannot be a placeholder")
    args = tuple(parse(key, arg, names, where=f"argument {index} {arg!r}: ")
                 for index, arg in enumerate(argv[1:], 1))
    program = render(parse(key, argv[0], ()), {})
    if "/" in program and not os.path.isabs(program):
        raise SettingError(key, f"program {program!r}: a name on PATH or an absolute path")
    path = shutil.which(program)
    if path is None:
        raise SettingError(key, f"program {program!r} not found or not executable")
    options_end = argv[1:].index(END_OF_OPTIONS) if END_OF_OPTIONS in argv[1:] else len(args)
    return Argv(program, path, args, options_end)
