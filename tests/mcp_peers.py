"""MCP servers for the tests, each run as its own process:

    python tests/mcp_peers.py peer stdio NAME       # the `mcp` SDK's MCPServer on stdio
    python tests/mcp_peers.py peer http NAME PORT    # the same on streamable HTTP
    python tests/mcp_peers.py hostile MODE           # a plain script that misbehaves

The peer is the official SDK's server (the `mcp` package, the tests' peer):
tools add, echo, picture (an image), long_text, slow (sleeps), and grow,
which adds the tool `late` and tells the client its list changed. NAME
shows in every answer, so a test sees which server answered.

The hostile server answers the handshake and tools/list as a server must,
with one tool `poke` (no arguments), then on tools/call does MODE:
- garbage: writes a line that is not JSON;
- huge: answers with a text of 100 MB, written in pieces;
- stranger: answers an id it was never asked, then the call;
- stall: never answers; writes each notification it gets to stderr;
- crash: exits with status 3 at the first call; started again (the file
  MARK exists), it answers the calls;
- chatter: prints a line of plain text to stdout.
"""

import json
import os
import sys


def peer(transport: str, name: str, port: int | None = None) -> None:
    import anyio
    from mcp.server.mcpserver import Context, Image, MCPServer

    server = MCPServer(name)

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return f"{name}: {a + b}"

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        return f"{name}: {text}"

    @server.tool()
    def picture() -> Image:
        """A small PNG."""
        return Image(data=b"\x89PNG" + bytes(996), format="png")

    @server.tool()
    def long_text(size: int) -> str:
        """A text of size characters."""
        return "x" * size

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return f"{name}: slept"

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Offer one more tool, `late`."""
        def late() -> str:
            """A tool added while the server runs."""
            return f"{name}: late"

        server.add_tool(late)
        await ctx.session.send_tool_list_changed()
        return f"{name}: grown"

    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)


def hostile(mode: str) -> None:
    out = sys.stdout.buffer

    def send(message: dict) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    marked = os.path.exists(os.environ.get("MARK", "/nonexistent"))
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": request_id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [
                {"name": "poke", "inputSchema": {"type": "object", "properties": {}}}]}})
        elif request_id is None:
            print(f"notification {line.decode().strip()}", file=sys.stderr, flush=True)
        elif method == "tools/call":
            call(mode, request_id, send, out, marked)


def call(mode: str, request_id, send, out, marked: bool) -> None:
    if mode == "garbage":
        out.write(b"\x00\xffnot json at all\n")
        out.flush()
    elif mode == "huge":
        head = b'{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"' \
            % request_id
        out.write(head)
        piece = b"x" * (1 << 20)
        for _ in range(100):
            out.write(piece)
        out.write(b'"}]}}\n')
        out.flush()
    elif mode == "stranger":
        send({"jsonrpc": "2.0", "id": 4242, "result": {"content": []}})
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [
            {"type": "text", "text": "too late"}]}})
    elif mode == "stall":
        return
    elif mode == "crash" and not marked:
        open(os.environ["MARK"], "w").close()
        sys.exit(3)
    elif mode == "chatter":
        out.write(b"Starting the frobnicator...\n")
        out.flush()
    else:
        send({"jsonrpc": "2.0", "id": request_id, "result": {"content": [
            {"type": "text", "text": "poked"}]}})


if __name__ == "__main__":
    if sys.argv[1] == "peer":
        peer(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None)
    else:
        hostile(sys.argv[2])
