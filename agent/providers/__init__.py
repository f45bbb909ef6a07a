"""The provider layer: requests in each wire format (requests.py, sans-IO)
and streaming them with httpx on trio (client.py). client.py's names are
imported at their first use, not with this package: the config, the history
and the devices need requests.py only, and an idle daemon no httpx."""

from agent.providers.requests import (
    PROTOCOLS,
    AssistantTurn,
    Conversation,
    Provider,
    Tool,
    ToolResult,
    UserTurn,
    build_request,
)

__all__ = ["PROTOCOLS", "Answer", "AssistantTurn", "Backoff", "Conversation", "Provider",
           "ProviderHTTPError", "Tool", "ToolsUnsupported", "ToolResult", "UpstreamError", "UpstreamUnavailable",
           "UserTurn", "build_request", "stream_answer"]

_CLIENT_NAMES = frozenset({"Answer", "Backoff", "ProviderHTTPError", "ToolsUnsupported",
                           "UpstreamError", "UpstreamUnavailable", "stream_answer"})


def __getattr__(name: str):
    if name in _CLIENT_NAMES:
        from agent.providers import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
