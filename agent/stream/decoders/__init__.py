"""Provider decoders: a response body in, common events and the final Message out."""

from agent.stream.decoders.openai_chat import OpenAIChatDecoder

__all__ = ["OpenAIChatDecoder"]
