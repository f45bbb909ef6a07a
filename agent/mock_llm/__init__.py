"""`homeagent mock-llm`: a loopback HTTP/1.1 server speaking the three wire
formats (OpenAI Chat Completions, Anthropic Messages, OpenAI Responses)
from scripted answers, with fault injection, so the daemon and its tests
need no network and no API key.

scripts.py chooses the answer, wire.py renders it, app.py decides the whole
reply (routing, key check, faults, request log), all sans-IO; server.py is
the trio + h11 shell around them.
"""
