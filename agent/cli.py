"""The homeagent command."""

from __future__ import annotations

import argparse
import json
import sys

_PROTOCOLS = {"sse": 0, "openai-chat": 1, "anthropic": 2, "openai-responses": 3, "ollama": 4}


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

    return demo.run(args.question)


def _mock_llm(args: argparse.Namespace) -> int:
    from agent.mock_llm import server

    faults = frozenset(f.strip() for f in (args.fault or "").split(",") if f.strip())
    unknown = faults - server.FAULTS - {server.REFUSE}
    if unknown:
        print(f"homeagent mock-llm: unknown --fault {', '.join(sorted(unknown))}",
              file=sys.stderr)
        return 2
    return server.main(args.host, args.port, args.require_key, faults, args.retry_after)


def _serve(args: argparse.Namespace) -> int:
    from agent.service import daemon

    if args.check:
        from agent.service.config import ConfigError, load

        try:
            config = load(args.config)
        except ConfigError as exc:
            print(f"homeagent: {exc}", file=sys.stderr)
            return 2
        for warning in config.warnings:
            print(f"homeagent: warning: {warning}", file=sys.stderr)
        print(f"{config.path}: ok; providers: {', '.join(config.providers)} "
              f"(default {config.default_provider})")
        return 0
    return daemon.main(args.config)


def _connect(args: argparse.Namespace):
    from agent.api.client import Client

    return Client(args.socket)


def _client_command(run):
    """Run a client command; a daemon that is not there is a one-line error, exit 3."""
    def command(args: argparse.Namespace) -> int:
        from agent.api.client import ConnectionLost, DaemonUnavailable

        try:
            return run(args)
        except (DaemonUnavailable, ConnectionLost) as exc:
            print(f"homeagent: {exc}", file=sys.stderr)
            return 3
    return command


@_client_command
def _ask(args: argparse.Namespace) -> int:
    from agent.cli_render import AskPrinter

    printer = AskPrinter(sys.stdout, sys.stderr, args.reasoning, args.json)
    fields = {"prompt": args.prompt}
    if args.session:
        fields["session"] = args.session
    if args.provider:
        fields["provider"] = args.provider
    with _connect(args) as client:
        request_id = client.send("ask", **fields)
        replies = client.replies(request_id, "ask")
        try:
            for reply in replies:
                printer.show(reply)
        except KeyboardInterrupt:
            client.send("cancel", target=request_id)
            for reply in replies:
                printer.show(reply)
            return 130
        finally:
            printer.close()
    return printer.exit_code


@_client_command
def _status(args: argparse.Namespace) -> int:
    from agent.cli_render import format_status

    with _connect(args) as client:
        reply = client.call("status")
    print(json.dumps(reply, indent=2, ensure_ascii=False) if args.json else format_status(reply))
    return 0


@_client_command
def _history(args: argparse.Namespace) -> int:
    from agent.cli_render import format_history, format_sessions

    with _connect(args) as client:
        reply = (client.call("history", session=args.session) if args.session
                 else client.call("sessions"))
    if reply["type"] == "error":
        print(f"homeagent: {reply['message']}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(reply, indent=2, ensure_ascii=False))
    else:
        print(format_history(reply) if args.session else format_sessions(reply))
    return 0


@_client_command
def _forget(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        reply = client.call("forget", session=args.session)
    if reply["type"] == "error":
        print(f"homeagent: {reply['message']}", file=sys.stderr)
        return 1
    print(f"forgot session {args.session}" if reply["forgotten"]
          else f"no session {args.session}")
    return 0


def _one_reply(args: argparse.Namespace, op: str, **fields) -> dict | None:
    """The reply to a one-reply request; None after printing its error."""
    with _connect(args) as client:
        reply = client.call(op, **fields)
    if args.json:
        print(json.dumps(reply, ensure_ascii=False))
    if reply["type"] == "error":
        print(f"homeagent: {reply['message']} ({reply['code']})", file=sys.stderr)
        return None
    return reply


@_client_command
def _say(args: argparse.Namespace) -> int:
    fields = {"text": args.text, **({"device": args.device} if args.device else {}),
              **({"board": args.board} if args.board else {})}
    reply = _one_reply(args, "announce", **fields)
    if reply is None:
        return 1
    if not args.json:
        print(f"announced on {', '.join(reply['devices'])}")
    return 0


@_client_command
def _stop(args: argparse.Namespace) -> int:
    reply = _one_reply(args, "stop", **({"session": args.session} if args.session else {}))
    if reply is None:
        return 1
    if not args.json:
        asks = len(reply["asks"])
        print(f"stopped {asks} ask{'s' * (asks != 1)}"
              + (f", silenced {', '.join(reply['devices'])}" if reply["devices"] else "")
              + f" in {reply['seconds'] * 1000:.0f} ms")
    return 0


@_client_command
def _timers(args: argparse.Namespace) -> int:
    from agent.cli_render import format_timers

    if (args.action == "cancel") != (args.id is not None):
        print("homeagent: timers cancel takes one id, such as t3; timers list none",
              file=sys.stderr)
        return 2

    reply = _one_reply(args, "timers", **({"cancel": args.id} if args.action == "cancel"
                                          else {}))
    if reply is None:
        return 1
    if not args.json:
        print(format_timers(reply))
    return 0


@_client_command
def _reload(args: argparse.Namespace) -> int:
    from agent.service import reload

    return reload.reload(args.pid, args.socket, args.timeout)


def _install(args: argparse.Namespace) -> int:
    from agent.service import install

    return install.install(args.root, args.venv, wheel=args.wheel, find_links=args.find_links,
                           enable=not args.no_enable)


def _uninstall(args: argparse.Namespace) -> int:
    from agent.service import install

    return install.uninstall(args.root, args.venv, purge=args.purge)


def main(argv: list[str] | None = None) -> int:
    from agent.api.client import default_socket
    # not the config's or install's module: every client command would import
    # them (trio, httpx, the C core, shutil, subprocess...) for two defaults
    from agent.paths import DEFAULT_PATH, DEFAULT_VENV

    parser = argparse.ArgumentParser(prog="homeagent", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon")
    serve.add_argument("--config", default=DEFAULT_PATH, help=f"default {DEFAULT_PATH}")
    serve.add_argument("--check", action="store_true",
                       help="check the config file and exit (0 good, 2 bad)")
    serve.set_defaults(func=_serve)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument("--socket", default=default_socket(),
                        help="the daemon's socket ($HOMEAGENT_SOCKET, default %(default)s)")
    client.add_argument("--json", action="store_true", help="print the replies as JSON")

    ask = sub.add_parser("ask", parents=[client], help="ask the daemon; the answer streams")
    ask.add_argument("prompt")
    ask.add_argument("--session", help="continue this session (default: a new one)")
    ask.add_argument("--provider", help="a configured provider (default: the config's)")
    ask.add_argument("--reasoning", choices=("dim", "show", "hide"), default="dim",
                     help="reasoning on stderr: dimmed (default), plain, or not at all")
    ask.set_defaults(func=_ask)

    status = sub.add_parser("status", parents=[client], help="the daemon's state")
    status.set_defaults(func=_status)

    history = sub.add_parser("history", parents=[client],
                             help="list sessions, or show one session's history")
    history.add_argument("session", nargs="?")
    history.set_defaults(func=_history)

    forget = sub.add_parser("forget", parents=[client], help="delete a session's history")
    forget.add_argument("session")
    forget.set_defaults(func=_forget)

    say = sub.add_parser("say", parents=[client], help="speak a text on the speech devices, "
                         "without asking the model")
    say.add_argument("text")
    say.add_argument("--device", help="this speech device only (default: every one running)")
    say.add_argument("--board", help="on this other board, through the MQTT broker")
    say.set_defaults(func=_say)

    stop = sub.add_parser("stop", parents=[client], help="stop what is being answered and "
                          "said (barge-in); the answers so far stay in their histories")
    stop.add_argument("--session", help="only the asks of this session (default: every ask, "
                      "and whatever the speech devices say)")
    stop.set_defaults(func=_stop)

    timers = sub.add_parser("timers", parents=[client], help="the timers and reminders "
                            "set, the soonest first (list), or cancel one by its id")
    timers.add_argument("action", nargs="?", choices=("list", "cancel"), default="list")
    timers.add_argument("id", nargs="?", help="with cancel: its id, such as t3")
    timers.set_defaults(func=_timers)

    from agent.service.reload import DEFAULT_TIMEOUT

    reload = sub.add_parser("reload", help="send the daemon SIGHUP and wait until it has "
                            "reloaded its config (the unit's ExecReload=); exit 1 if it "
                            "refused the config")
    reload.add_argument("--pid", type=int, required=True, help="the daemon's process id")
    reload.add_argument("--socket", default=default_socket(),
                        help="the daemon's socket ($HOMEAGENT_SOCKET, default %(default)s)")
    reload.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help="seconds to wait (default %(default)g)")
    reload.set_defaults(func=_reload)

    demo = sub.add_parser("demo", help="start a mock model server and the daemon, ask, "
                          "stream the answer, stop both")
    demo.add_argument("question", nargs="*", help="default: a few questions that show "
                      "streaming, reasoning and several languages")
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
    mock.add_argument("--fault", metavar="LIST",
                      help="faults of every request (the x-mock-fault names, comma-separated), "
                      "or refuse: the port is bound but refuses every connection")
    mock.add_argument("--retry-after", type=float, default=1.0, metavar="SECONDS",
                      help="the Retry-After of a 429 (default 1)")
    mock.set_defaults(func=_mock_llm)

    place = argparse.ArgumentParser(add_help=False)
    place.add_argument("--root", default="/", help="work on this directory tree instead "
                       "of / (a board image: nothing is started or stopped)")
    place.add_argument("--venv", default=DEFAULT_VENV,
                       help="the venv, as a path on the board; default %(default)s")

    install = sub.add_parser("install", parents=[place], help="install the daemon as a "
                             "systemd service: venv, units, user, config, enable")
    install.add_argument("--wheel", help="pip install this homeagent wheel into the venv "
                         "(created if absent); default: keep the venv as it is")
    install.add_argument("--find-links", metavar="DIR", help="with --wheel: take the "
                         "dependencies from the wheels in DIR only (pip --no-index)")
    install.add_argument("--no-enable", action="store_true",
                         help="write everything but do not enable or start the units")
    install.set_defaults(func=_install)

    uninstall = sub.add_parser("uninstall", parents=[place], help="stop and remove the "
                               "service; the config and the state stay unless --purge")
    uninstall.add_argument("--purge", action="store_true", help="also remove the config, "
                           "the credentials and the state (session history)")
    uninstall.set_defaults(func=_uninstall)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
