"""Provider decoders: a response body in, common events and the final Message out."""

from agent.stream.decoders.anthropic import AnthropicDecoder
from agent.stream.decoders.ollama import OllamaDecoder
from agent.stream.decoders.openai_chat import OpenAIChatDecoder
from agent.stream.decoders.openai_responses import OpenAIResponsesDecoder

__all__ = ["AnthropicDecoder", "OllamaDecoder", "OpenAIChatDecoder", "OpenAIResponsesDecoder"]
