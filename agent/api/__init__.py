"""The socket door: the JSON-lines protocol (protocol.py requests, wire.py
replies as lines), the trio server (server.py), the subscribers as a
listener of the center (subscribers.py), and the blocking client the CLI
uses (client.py)."""
