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

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
