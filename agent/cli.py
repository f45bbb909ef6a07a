"""The homeagent command."""

from __future__ import annotations

import argparse
import sys

_PROTOCOLS = {"sse": 0, "openai-chat": 1, "anthropic": 2, "openai-responses": 3}


def _decode(args: argparse.Namespace) -> int:
    from agent.stream import Protocol, StreamDecoder

    decoder = StreamDecoder(Protocol(_PROTOCOLS[args.protocol]))
    source = sys.stdin.buffer if args.file == "-" else open(args.file, "rb")
    with source:
        while chunk := source.read(args.read_size):
            for event in decoder.feed(chunk):
                print(event)
    for event in decoder.close():
        print(event)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from agent import demo

    return demo.run(seed=args.seed)


def _mock_llm(args: argparse.Namespace) -> int:
    from agent.mock_llm import server

    return server.main(args.host, args.port, args.require_key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="homeagent", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="decode a built-in model stream and show the result")
    demo.add_argument("--seed", type=int, default=7, help="seed of the random read sizes")
    demo.set_defaults(func=_demo)

    decode = sub.add_parser("decode", help="print the events of a raw SSE response body")
    decode.add_argument("file", help="the body, or - for standard input")
    decode.add_argument("--protocol", choices=sorted(_PROTOCOLS), default="openai-chat")
    decode.add_argument("--read-size", type=int, default=4096, help="bytes per read")
    decode.set_defaults(func=_decode)

    mock = sub.add_parser("mock-llm", help="serve scripted model answers on loopback, for tests")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=0, help="0 picks a free port")
    mock.add_argument("--require-key", metavar="KEY",
                      help="answer 401 unless requests carry this API key")
    mock.set_defaults(func=_mock_llm)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
