"""homeagent: an LLM agent daemon for small ARM boards."""

__version__ = "0.1.0"
