"""What an MCP server's tools and results become for the model, sans-IO.

catalog(): the server's tool objects to ToolSpecs named `<server>_<tool>`,
within the server's allow and deny globs (on the server's own names). A
tool is skipped, with the reason kept for status, when its prefixed name is
not one every provider accepts or its inputSchema is not one
agent/tools/schema.py can check: the model's arguments are always checked
against the schema before a call. Keywords that only annotate (format,
$schema, $comment, deprecated, readOnly, ...) are taken out first: they
constrain nothing a checker must enforce.

render(): a tools/call result to the text the model is told. Text is kept
and trimmed to the byte bound with a note saying how much there was;
images, audio and resources are summarized by type and size, never dumped
into the conversation; structuredContent stands in when there is no
content. isError makes it an error result.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from agent.tools.base import ToolSpec
from agent.tools.schema import SchemaError, check_schema

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what every provider accepts
MAX_DESCRIPTION = 1024  # characters of a tool's description sent to the model
_ANNOTATIONS = frozenset({"format", "$schema", "$id", "$comment", "deprecated", "readOnly",
                          "writeOnly", "contentMediaType", "contentEncoding"})
_SUBSCHEMA = ("items", "additionalProperties")
_SUBSCHEMAS = ("anyOf", "oneOf")
_SHOWN = 64


@dataclass(frozen=True, slots=True)
class Skipped:
    tool: str
    why: str


def catalog(server: str, tools, allow: tuple[str, ...], deny: tuple[str, ...],
            timeout: float) -> tuple[tuple[ToolSpec, ...], dict[str, str], tuple[Skipped, ...]]:
    """(specs, the server's name of each spec's tool, skipped tools)."""
    specs: list[ToolSpec] = []
    names: dict[str, str] = {}
    skipped: list[Skipped] = []
    for tool in tools:
        name = tool.get("name")
        if not isinstance(name, str):
            skipped.append(Skipped("?", "a tool without a name"))
            continue
        if (allow and not _matches(name, allow)) or _matches(name, deny):
            continue
        shown = name if len(name) <= _SHOWN else name[:_SHOWN - 1] + "…"
        prefixed = f"{server}_{name}"
        if not TOOL_NAME.fullmatch(prefixed):
            skipped.append(Skipped(shown, f"{prefixed[:_SHOWN]!r} is not 1 to 64 letters, "
                                          "digits, '_' or '-'"))
            continue
        if prefixed in names:
            skipped.append(Skipped(shown, "listed twice"))
            continue
        schema = plain_schema(tool.get("inputSchema"))
        try:
            check_schema(schema)
        except SchemaError as error:
            skipped.append(Skipped(shown, f"its inputSchema cannot be checked: {error}"))
            continue
        description = tool.get("description")
        description = description[:MAX_DESCRIPTION] if isinstance(description, str) else ""
        specs.append(ToolSpec(prefixed, description, schema, timeout))
        names[prefixed] = name
    return tuple(specs), names, tuple(skipped)


def _matches(name: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def plain_schema(schema: Any, depth: int = 0) -> Any:
    """schema without annotation keywords, where schemas stand; anything
    that is not an object is returned as it is, for check_schema to name."""
    if not isinstance(schema, dict) or depth > 64:
        return schema
    plain = {key: value for key, value in schema.items() if key not in _ANNOTATIONS}
    if isinstance(plain.get("properties"), dict):
        plain["properties"] = {name: plain_schema(sub, depth + 1)
                               for name, sub in plain["properties"].items()}
    for key in _SUBSCHEMA:
        if key in plain:
            plain[key] = plain_schema(plain[key], depth + 1)
    for key in _SUBSCHEMAS:
        if isinstance(plain.get(key), list):
            plain[key] = [plain_schema(sub, depth + 1) for sub in plain[key]]
    return plain


def render(result: Mapping[str, Any], max_bytes: int) -> tuple[str, bool]:
    """(the text for the model, whether it is an error result)."""
    is_error = result.get("isError") is True
    content = result.get("content")
    parts: list[str] = []
    if isinstance(content, list):
        parts = [_part(item) for item in content]
    if not parts and "structuredContent" in result:
        parts = [json.dumps(result["structuredContent"], ensure_ascii=False,
                            separators=(",", ":"))]
    text = "\n".join(parts) if parts else "(no content)"
    return trim(text, max_bytes), is_error


def _part(item: Any) -> str:
    if not isinstance(item, dict):
        return "[a content item that is not an object]"
    kind = item.get("type")
    if kind == "text" and isinstance(item.get("text"), str):
        return item["text"]
    if kind in ("image", "audio"):
        return f"[{kind} {_word(item.get('mimeType'))}, {_base64_size(item.get('data'))} bytes]"
    if kind == "resource" and isinstance(item.get("resource"), dict):
        resource = item["resource"]
        size = (len(resource["text"].encode()) if isinstance(resource.get("text"), str)
                else _base64_size(resource.get("blob")))
        return (f"[resource {_word(resource.get('uri'))} {_word(resource.get('mimeType'))}, "
                f"{size} bytes]")
    if kind == "resource_link":
        return f"[resource link {_word(item.get('uri'))} {_word(item.get('mimeType'))}]"
    return f"[{_word(kind)} content]"


def _word(value: Any) -> str:
    """A peer's short field in a summary: its text cut, "unknown" for none."""
    if not isinstance(value, str) or not value:
        return "unknown"
    value = value.replace("\n", " ").replace("]", ")")
    return value if len(value) <= _SHOWN else value[:_SHOWN - 1] + "…"


def _base64_size(data: Any) -> int:
    if not isinstance(data, str):
        return 0
    return len(data) * 3 // 4 - (data.endswith("=") + data.endswith("=="))


def trim(text: str, max_bytes: int) -> str:
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= max_bytes:
        return text
    kept = encoded[:max_bytes].decode("utf-8", "ignore")  # never half a character
    return f"{kept}\n[trimmed: {len(encoded)} bytes of text, the first {max_bytes} kept]"
