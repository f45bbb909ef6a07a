"""The mock server's decisions, sans-IO: one request in, one `Reply` out.

`MockApp` routes, checks the key, records the request, applies the faults
asked for and renders the answer. The trio shell (server.py) only moves
bytes: it sends `Reply.parts` and then does what `Reply.ending` says.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import zlib
from dataclasses import dataclass, field
from enum import Enum

from agent.mock_llm import scripts, wire
from agent.mock_llm.cache import HEADER as CACHE_HEADER, PromptCache

FAULTS = frozenset({"drop", "stall", "429", "500-once", "error-event", "garbage",
                    "json-error", "not-streamed", "html", "empty", "gzip", "deflate",
                    "cut-json", "500", "401", "stall-start", "error-first", "cut-string",
                    "once"})
# Faults that break a stream after part of it was sent; with "once" they
# break only the first such answer of each x-mock-fault-key, so that the
# answer's continuation, on the same instance, comes whole.
MID_STREAM = frozenset({"drop", "stall", "error-event", "cut-string"})
MASKED_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "proxy-authorization"})
REQUESTS_PATH = "/_mock/requests"
FAULTS_PATH = "/_mock/faults"  # GET or PUT the faults of every request to this instance

# Not an event stream: an HTML error page from some proxy, a NUL and bytes
# that are not UTF-8, so a decoder meets unknown fields and bad data.
GARBAGE = (b"<html>\n<head><title>502 Bad Gateway</title></head>\n"
           b"<body>upstream went away</body>\n</html>\n\n"
           b"\x00\xff\xfe binary \x80\x81\n\n{not json}\n\n")


class Ending(Enum):
    COMPLETE = "complete"  # end the message; the connection stays open for the next one
    DROP = "drop"          # close the connection where the parts stop
    STALL = "stall"        # send nothing more; hold the connection until the client closes it


@dataclass(slots=True)
class Reply:
    status: int
    headers: list[tuple[str, str]]
    parts: list[bytes]
    streaming: bool = False        # chunked transfer; otherwise headers carry content-length
    ending: Ending = Ending.COMPLETE
    delay: float = 0.0             # seconds to sleep before each part but the first


@dataclass
class MockApp:
    """faults apply to every request, with those of its x-mock-fault header;
    retry_after is what a 429 says."""
    require_key: str | None = None
    requests: list[dict] = field(default_factory=list)
    faults: frozenset[str] = frozenset()
    retry_after: float = 1
    _failed_once: set = field(default_factory=set)
    _broken_once: set = field(default_factory=set)
    prompt_cache: PromptCache = field(default_factory=PromptCache)

    def handle(self, connection: int, method: str, target: str,
               headers: list[tuple[str, str]], body: bytes) -> Reply:
        path = target.split("?", 1)[0]
        if path == REQUESTS_PATH:
            return self._requests(method)
        if path == FAULTS_PATH:
            return self._faults(method, body)
        self.requests.append(_record(connection, method, path, headers, body))
        fmt = wire.FORMATS.get(path)
        if fmt is None:
            return _json_reply(404, wire.ChatCompletions.error_body(404, f"no route {path}"))
        if method != "POST":
            return _json_reply(405, fmt.error_body(405, f"{method} is not allowed on {path}"))
        names = dict(headers)
        if not self._key_ok(fmt, names):
            return _json_reply(401, fmt.error_body(401, "invalid API key (mock)"))
        faults = {f.strip() for f in names.get("x-mock-fault", "").split(",") if f.strip()}
        faults |= self.faults
        if faults - FAULTS:
            unknown = ", ".join(sorted(faults - FAULTS))
            return _json_reply(400, fmt.error_body(400, f"unknown x-mock-fault: {unknown}"))
        quirks = frozenset(q.strip() for q in names.get("x-mock-quirks", "").split(",")
                           if q.strip())
        if quirks - wire.CHAT_QUIRKS or (quirks and fmt is not wire.ChatCompletions):
            return _json_reply(400, fmt.error_body(400, "x-mock-quirks are "
                                                        + ", ".join(sorted(wire.CHAT_QUIRKS))
                                                        + ", for Chat Completions only"))
        try:
            request = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            request = None
        if not isinstance(request, dict):
            return _json_reply(400, fmt.error_body(400, "the body is not a JSON object"))

        if request.get("tools") and quirks & {"tools-400", "tools-500"}:
            # The words Ollama and llama.cpp use for a model or build without tools.
            status, words = ((400, f"{request.get('model')} does not support tools")
                             if "tools-400" in quirks else
                             (500, "tools param requires --jinja flag"))
            return _json_reply(status, fmt.error_body(status, words))
        # A reasoning model's reasoning that had to come back and did not
        # (docs/reasoning-replay.md): 400, as DeepSeek, Anthropic and OpenAI answer.
        replay_problem = getattr(fmt, "replay_problem", None)
        problem = replay_problem(request, body) if replay_problem else None
        if problem is not None:
            return _json_reply(400, fmt.error_body(400, problem))
        if "401" in faults:
            return _json_reply(401, fmt.error_body(401, "invalid API key (mock)"))
        if "500" in faults:
            return _json_reply(500, fmt.error_body(500, "internal server error (mock)"))
        if "429" in faults:
            return _json_reply(429, fmt.error_body(429, "rate limit reached (mock)"),
                               [("retry-after", f"{self.retry_after:g}")])
        if "500-once" in faults:
            key = (path, names.get("x-mock-fault-key", ""))
            if key not in self._failed_once:
                self._failed_once.add(key)
                return _json_reply(500, fmt.error_body(500, "internal server error (mock)"))
        if "garbage" in faults:
            return Reply(200, [("content-type", "text/event-stream")], [GARBAGE], streaming=True)
        # Answers that are no stream, all with HTTP 200: what a misconfigured
        # server or a proxy in the way sends.
        if "json-error" in faults:
            return _json_reply(200, fmt.error_body(404, "model 'mock-small' not loaded (mock)"))
        if "html" in faults:
            page = b"<html><body><h1>Welcome to the hotel network</h1></body></html>\n"
            return Reply(200, [("content-type", "text/html; charset=utf-8"),
                               ("content-length", str(len(page)))], [page])
        if "empty" in faults:
            return Reply(200, [("content-type", "text/event-stream"),
                               ("content-length", "0")], [])

        streaming = request.get("stream") is True and "not-streamed" not in faults
        conversation = fmt.conversation(request)
        answer = scripts.choose_answer(conversation)
        if "x-mock-answer" in names and conversation.tool_result is None:
            try:
                answer = scripts.Answer(scripts.forced_text(names["x-mock-answer"]))
            except ValueError as exc:
                return _json_reply(400, fmt.error_body(400, f"x-mock-answer: {exc}"))
        forced = names.get("x-mock-tool-call")
        if forced and conversation.tool_result is None:
            try:
                answer = scripts.forced_tool_call(forced)
            except ValueError as exc:
                return _json_reply(400, fmt.error_body(400, f"x-mock-tool-call: {exc}"))
        if conversation.continues is not None:
            answer = scripts.continued(answer, conversation)
        if "once" in faults:
            key = (path, names.get("x-mock-fault-key", ""))
            if key in self._broken_once:
                faults -= MID_STREAM
            self._broken_once.add(key)
        turn = _turn(request, body, names, quirks, conversation.user_text)
        if names.get(CACHE_HEADER, "").lower() == "on":
            turn = dataclasses.replace(turn, cache=(
                self.prompt_cache.anthropic(request) if fmt is wire.AnthropicMessages
                else self.prompt_cache.automatic(path, body)))
        if streaming:
            parts = fmt.stream(answer, turn)
            headers_out = [("content-type", f"{fmt.stream_type}; charset=utf-8"),
                           ("cache-control", "no-cache")]
        else:
            parts = [_dumps(fmt.complete(answer, turn))]
            headers_out = [("content-type", "application/json"),
                           ("content-length", str(len(parts[0])))]
        reply = Reply(200, headers_out, parts, streaming=streaming,
                      delay=_delay(names.get("x-mock-delay-ms")))
        _apply_cut(reply, faults, fmt, turn)
        for encoding in ("gzip", "deflate"):
            if encoding in faults:
                _compress(reply, encoding)
        return reply

    def _key_ok(self, fmt, headers: dict) -> bool:
        if self.require_key is None:
            return True
        sent = headers.get(fmt.key_header, "")
        expected = self.require_key if fmt.key_header == "x-api-key" else f"Bearer {self.require_key}"
        return hmac.compare_digest(sent.encode(), expected.encode())

    def _faults(self, method: str, body: bytes) -> Reply:
        """PUT {"faults": [...], "retry_after": seconds}: the instance's faults from now on."""
        if method == "PUT":
            try:
                value = json.loads(body)
                faults = frozenset(value["faults"])
                retry_after = value.get("retry_after", self.retry_after)
            except (UnicodeDecodeError, ValueError, TypeError, KeyError):
                return _json_reply(400, {"error": {"message": 'expected {"faults": [...]}'}})
            if faults - FAULTS or not isinstance(retry_after, (int, float)) or retry_after < 0:
                return _json_reply(400, {"error": {"message": "unknown faults or a bad "
                                                              "retry_after"}})
            self.faults, self.retry_after = faults, retry_after
        elif method != "GET":
            return _json_reply(405, {"error": {"message": f"{method} is not allowed"}})
        return _json_reply(200, {"faults": sorted(self.faults), "retry_after": self.retry_after})

    def _requests(self, method: str) -> Reply:
        if method == "GET":
            return _json_reply(200, self.requests)
        if method == "DELETE":
            cleared, self.requests = len(self.requests), []
            return _json_reply(200, {"cleared": cleared})
        return _json_reply(405, {"error": {"message": f"{method} is not allowed"}})


def _apply_cut(reply: Reply, faults: set, fmt, turn: wire.Turn) -> None:
    """Stop the body half-way for drop, stall, error-event and cut-string;
    at its start for stall-start and error-first."""
    middle = len(reply.parts) // 2
    if "drop" in faults:
        # Cut inside a part, so the client is left with half an event too.
        cut = reply.parts[middle]
        reply.parts = reply.parts[:middle] + [cut[:len(cut) // 2]]
        reply.ending = Ending.DROP
    elif "stall-start" in faults and reply.streaming:
        reply.parts, reply.ending = [], Ending.STALL
    elif "error-first" in faults and reply.streaming:
        reply.parts = [fmt.error_event("the model is overloaded (mock)", turn, 0)]
    elif "stall" in faults:
        # A one-part (non-stream) body stalls half-way through its bytes.
        reply.parts = reply.parts[:middle] or [reply.parts[0][:len(reply.parts[0]) // 2]]
        reply.ending = Ending.STALL
    elif "error-event" in faults and reply.streaming:
        reply.parts = reply.parts[:middle] + [
            fmt.error_event("the model is overloaded (mock)", turn, middle)]
    elif "cut-string" in faults and reply.streaming:
        # The body ends, as if whole, inside a JSON string of the middle event:
        # before the closing quote of its last string.
        data = reply.parts[middle]
        reply.parts = reply.parts[:middle] + [data[:data.rstrip(b"\r\n").rfind(b'"')]]
    elif "cut-json" in faults and reply.streaming:
        # The middle event's JSON loses its second half; the event still ends.
        part = reply.parts[middle]
        data = part.rstrip(b"\r\n")
        reply.parts[middle] = data[:len(data) // 2] + part[len(data):]


def _compress(reply: Reply, encoding: str) -> None:
    """Content-Encoding gzip or deflate (zlib format), each part flushed so
    that it decodes as it arrives."""
    z = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
    parts = [z.compress(part) + z.flush(zlib.Z_SYNC_FLUSH) for part in reply.parts]
    parts[-1] += z.flush()
    reply.parts = parts
    reply.headers = [(k, v) for k, v in reply.headers if k != "content-length"]
    reply.headers.append(("content-encoding", encoding))
    if not reply.streaming:
        reply.headers.append(("content-length", str(sum(map(len, parts)))))


def _turn(request: dict, body: bytes, headers: dict, quirks: frozenset[str],
          user_text: str = "") -> wire.Turn:
    model = request.get("model")
    options = request.get("stream_options")
    return wire.Turn(
        model=model if isinstance(model, str) else "mock-model",
        seed=hashlib.sha256(body).hexdigest()[:12],
        input_tokens=max(1, len(body) // 4),
        eol="\r\n" if headers.get("x-mock-line-ends", "").lower() == "crlf" else "\n",
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        quirks=quirks, user_text=user_text)


def _delay(value: str | None) -> float:
    try:
        return max(0.0, float(value)) / 1000 if value else 0.0
    except ValueError:
        return 0.0


def _record(connection: int, method: str, path: str, headers: list[tuple[str, str]],
            body: bytes) -> dict:
    shown: dict[str, str] = {}
    for name, value in headers:
        value = "***" if name in MASKED_HEADERS else value
        shown[name] = f"{shown[name]}, {value}" if name in shown else value
    try:
        parsed = json.loads(body) if body else None
    except (UnicodeDecodeError, ValueError):
        parsed = body.decode("utf-8", "replace")
    # raw: the body's own bytes, for tests of what the client sent byte by byte
    return {"connection": connection, "method": method, "path": path,
            "headers": shown, "body": parsed, "raw": body.decode("utf-8", "replace")}


def _dumps(value) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _json_reply(status: int, value, headers: list[tuple[str, str]] = ()) -> Reply:
    body = _dumps(value)
    return Reply(status, [("content-type", "application/json"),
                          ("content-length", str(len(body))), *headers], [body])
