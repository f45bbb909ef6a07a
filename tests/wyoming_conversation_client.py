"""Home Assistant's side of a Wyoming conversation agent, for the tests: the
`wyoming` package's own client (the reference implementation, asyncio), in
its own process.

    python wyoming_conversation_client.py URI TEXT[@CONVERSATION_ID] ...

Sends `describe` and prints the `info` event, then for each argument a
`transcript` (with context.conversation_id when given) and every event that
comes back until `handled` or `not-handled`. One JSON object per line:
{"type": ..., "data": ...}.
"""

from __future__ import annotations

import asyncio
import json
import sys


async def main(uri: str, transcripts: list[str]) -> None:
    from wyoming.asr import Transcript
    from wyoming.client import AsyncClient
    from wyoming.info import Describe, Info

    def show(event) -> None:
        print(json.dumps({"type": event.type, "data": event.data}), flush=True)

    async with AsyncClient.from_uri(uri) as client:
        await client.write_event(Describe().event())
        while not Info.is_type((event := await client.read_event()).type):
            pass
        show(event)
        for argument in transcripts:
            text, _, conversation = argument.partition("@")
            context = {"conversation_id": conversation} if conversation else None
            await client.write_event(Transcript(text=text, context=context).event())
            while True:
                event = await client.read_event()
                if event is None:
                    print(json.dumps({"type": "closed", "data": {}}), flush=True)
                    return
                show(event)
                if event.type in ("handled", "not-handled"):
                    break


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:]))
