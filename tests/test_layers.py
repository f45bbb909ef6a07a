"""The package's floors, held by its own imports (docs/architecture.md).

Every `agent.*` import of every module, at its top or inside a function,
read with ast: a module imports its own package and packages on a lower
floor only, so no package circle can form; no lower module imports
`service/` or a door; devices and session reach the center, never `api/`.
The one door module below the doors is the Wyoming framing, sans-IO, which
the speech device speaks to its TTS server (and the voice door, a door
beside it, to its microphone and ASR servers).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agent

# The package as imported: the checkout's, or the installed wheel's where the
# suite runs without a checkout (toolchain/arm64.sh).
AGENT = Path(agent.__file__).resolve().parent

# Lowest first. A module may import its own package and any of a lower floor.
FLOORS: list[set[str]] = [
    {"jsontypes", "lines", "masking", "jsonline", "paths"},
    {"stream", "settings", "text"},
    {"providers", "core"},
    {"tools", "mock_llm"},
    {"session"},
    {"devices"},
    {"api", "mqtt", "wyoming", "voice"},  # the doors
    {"service"},
    {"cli_render"},
    {"demo"},
    {"cli"},
]
FLOOR = {package: level for level, packages in enumerate(FLOORS) for package in packages}
DOORS = FLOORS[6]
# A door's sans-IO protocol module a lower floor, or another door, may use.
BELOW_ITS_DOOR = {"agent.wyoming.framing"}


def package_of(module: str) -> str:
    """agent.core.center -> core; agent.cli -> cli."""
    return module.split(".")[1]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(AGENT.rglob("*.py")):
        parts = path.relative_to(AGENT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1:
            found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each agent.* import in the file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if alias.name.startswith("agent.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "agent":  # from agent import masking
                found += [(node.lineno, f"agent.{alias.name}") for alias in node.names
                          if alias.name != "__version__"]
            elif node.module.startswith("agent."):
                # from agent.wyoming import framing: the module, not the package
                found += [(node.lineno, f"{node.module}.{alias.name}")
                          if f"{node.module}.{alias.name}" in MODULES
                          else (node.lineno, node.module) for alias in node.names]
    return sorted(set(found))


def test_every_package_has_a_floor():
    assert {package_of(module) for module in MODULES} <= set(FLOOR), \
        sorted({package_of(module) for module in MODULES} - set(FLOOR))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_package_and_lower_floors(module):
    own = package_of(module)
    wrong = []
    for line, imported in imports(MODULES[module]):
        target = package_of(imported)
        if target == own:
            continue
        if any(imported == m or imported.startswith(m + ".") for m in BELOW_ITS_DOOR) \
                and FLOOR[own] <= FLOOR[target]:
            continue  # a door's sans-IO framing: a device or another door speaks its protocol
        if FLOOR[target] >= FLOOR[own]:
            wrong.append(f"line {line}: {imported} ({target}, floor {FLOOR[target]}) from "
                         f"{own} (floor {FLOOR[own]})")
    assert not wrong, "\n".join(wrong)


def test_the_rules_the_floors_stand_for():
    """What the floors above mean, said once more as the rules themselves."""
    assert FLOOR["service"] > max(FLOOR[p] for p in FLOOR if p not in
                                  {"service", "cli", "cli_render", "demo"})
    for door in DOORS:
        assert FLOOR[door] > FLOOR["devices"] > FLOOR["session"] > FLOOR["core"]
    assert FLOOR["core"] < FLOOR["tools"] < FLOOR["session"]


def test_the_checker_sees_a_wrong_import(tmp_path):
    """The test above can fail: a device module importing the socket door
    is caught, at the top or inside a function."""
    path = tmp_path / "bad.py"
    path.write_text("from agent.core import replies\n\n\ndef f():\n"
                    "    from agent.api.server import ApiServer\n")
    assert imports(path) == [(1, "agent.core.replies"), (5, "agent.api.server")]
    assert FLOOR[package_of("agent.api.server")] >= FLOOR["devices"]
