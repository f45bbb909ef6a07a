"""The local socket API: the line protocol (sans-IO), the trio server, and
the client the CLI uses."""
