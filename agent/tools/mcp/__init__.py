"""MCP servers as tool providers: a client of the Model Context Protocol
built as the rest of the daemon is, a sans-IO protocol object
(protocol.py: requests, ids, the pending table, version negotiation,
pagination, notifications, stdio and SSE framing) in thin trio shells, one
per transport (stdio.py: a child process; http.py: streamable HTTP), and
the provider that supervises a server and turns its tools and results into
the toolbox's (provider.py, content.py). config.py is its config table."""
