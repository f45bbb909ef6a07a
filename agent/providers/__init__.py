"""The provider layer: requests in each wire format (requests.py, sans-IO)
and streaming them with httpx on trio (client.py)."""

from agent.providers.client import (
    Answer,
    Backoff,
    ProviderHTTPError,
    ToolsUnsupported,
    UpstreamError,
    UpstreamUnavailable,
    stream_answer,
)
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
