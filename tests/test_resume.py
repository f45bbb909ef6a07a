"""An answer that survives its provider failing mid-stream (docs/failover.md).

- The splice (agent/providers/resume.py), sans-IO: what of a continuation
  reaches the client, for every way a model may continue, however its
  text is cut into deltas.
- The continuation request per protocol: the delivered text after the
  history, the earlier request's bytes a prefix of it (the prompt cache).
- End to end with real `homeagent mock-llm` processes and the runner in
  process: each protocol, each mid-stream fault (the connection dropped,
  a stall past a short read timeout, an error event, a body cut inside a
  JSON string), resumed on the same provider ("once" faults) and on a
  fallback of another protocol; bounded attempts; resume off.
- The whole daemon as a process with a speech device (a command device
  whose program appends each spoken sentence to a file): Chat primary,
  Anthropic fallback, and a tool call cut half-way run once.
No test times anything: the timeouts are hang guards.
"""

from __future__ import annotations

import itertools
import json
import sys
import time

import pytest
import trio
from hypothesis import given, settings, strategies as st

from agent.core import replies
from agent.core.replies import ErrorCode
from agent.mock_llm.scripts import ENGLISH
from agent.providers.health import HealthBoard, Policy
from agent.providers.requests import (Conversation, Provider, UserTurn, build_request,
                                      encode_body)
from agent.providers.resume import CONTINUE_INSTRUCTION, Splice
from agent.session.runner import Runner, Upstream
from agent.session.store import SessionStore
from agent.service.daemon import http_client
from conftest import timeout
from daemon_harness import Daemon, MockServer, toml_value
from helpers import of_type

# ---- the splice ----

CUT = "The living room is 21.5 °C and the hu"  # the beginning of the mock's ENGLISH


def spliced(delivered: str, pieces: list[str], restart: bool) -> str:
    splice = Splice(delivered, restart)
    return delivered + "".join(splice.feed(piece) for piece in pieces)


def cuts(text: str, data) -> list[str]:
    """text cut into deltas where hypothesis says."""
    points = sorted(data.draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=8)))
    return [text[a:b] for a, b in itertools.pairwise([0, *points, len(text)])]


WARM = "It is warm. The window is open. Shall I close it?"
WARM_CUT = "It is warm. The window is op"


@settings(max_examples=60, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("continuation", [
    WARM,                                     # the whole answer again
    "The window is open. Shall I close it?",  # the cut sentence again, as asked
    "en. Shall I close it?",                  # only the rest, as a prefill gives it
])
def test_a_continuation_repeats_nothing_however_it_is_cut(continuation, data):
    assert spliced(WARM_CUT, cuts(continuation, data), restart=True) == WARM


def test_a_restart_told_differently_is_dropped_to_its_sentence_end():
    # Nothing said twice: the cut sentence stays cut, the next one follows.
    assert spliced(CUT, ["The living room is at 21.5 °C.", " Anything else?"], True) \
        == CUT + " Anything else?"


def test_text_that_repeats_nothing_flows_as_it_comes():
    assert spliced("Done.", ["Anything", " else?"], True) == "Done. Anything else?"
    assert spliced("Done. ", [" Anything else?"], False) == "Done. Anything else?"
    assert spliced("客厅现在是二十一度半，", ["湿度百分之四十。"], True) == \
        "客厅现在是二十一度半，湿度百分之四十。"


def test_a_prefill_continuation_is_taken_as_it_is():
    assert spliced(CUT, ["midity", " is 40 %."], False) == \
        "The living room is 21.5 °C and the humidity is 40 %."


# ---- the continuation request ----

PROTOCOLS = {
    "chat": {"protocol": "openai-chat"},
    "chat-prefill": {"protocol": "openai-chat", "prefill": True},
    "anthropic": {"protocol": "anthropic"},
    "anthropic-thinking": {"protocol": "anthropic", "thinking_budget": 1024},
    "responses": {"protocol": "openai-responses"},
    "ollama": {"protocol": "ollama"},
}
PREFILLS = {"chat-prefill", "anthropic"}


def provider(name: str, url: str, settings: dict, **more) -> Provider:
    base = url if settings["protocol"] == "ollama" else url + "/v1"
    return Provider(name, base_url=base, model=f"{name}-model", **{**settings, **more})


@pytest.mark.parametrize("kind", PROTOCOLS)
def test_a_continuation_keeps_the_earlier_request_as_its_prefix(kind):
    made = provider("p", "http://127.0.0.1:9", PROTOCOLS[kind])
    turns = [UserTurn("Hello there")]
    plain = encode_body(build_request(made, Conversation("Be brief.", turns, "s1"))[2])
    body = build_request(made, Conversation("Be brief.", turns, "s1", resume=CUT + " "))[2]
    # Only the closing brackets of the list of messages and of the body differ.
    assert encode_body(body).startswith(plain[:-2])
    text = json.dumps(body, ensure_ascii=False)
    if kind in PREFILLS:
        assert CONTINUE_INSTRUCTION not in text
        last = body["messages"][-1]
        assert last["role"] == "assistant"
        assert CUT in json.dumps(last, ensure_ascii=False)
        assert not json.dumps(last).endswith(' "}]}')  # no trailing whitespace (Anthropic)
    else:
        assert CONTINUE_INSTRUCTION in text and CUT in text
    assert ("continue_final_message" in body) == (kind == "chat-prefill")


def test_resume_and_prefill_are_checked():
    with pytest.raises(ValueError, match="resume must be one of off, same, fallback"):
        provider("p", "http://h", PROTOCOLS["chat"], resume="sometimes")
    with pytest.raises(ValueError, match="prefill is an option of protocol"):
        provider("p", "http://h", PROTOCOLS["ollama"], prefill=True)


# ---- end to end: the runner in process, mock-llm processes ----

FAULTS = ["drop", "stall", "error-event", "cut-string"]
WHY = {"drop": ErrorCode.INTERRUPTED, "stall": ErrorCode.INTERRUPTED,
       "error-event": ErrorCode.PROVIDER_ERROR, "cut-string": ErrorCode.INTERRUPTED}
SHORT_READ = 0.5  # seconds: the stall's read timeout; a stall never ends, so nothing races it
keys = itertools.count()


@pytest.fixture(scope="module")
def mock():
    server = MockServer.start()
    yield server
    server.stop()


class Asker:
    def __init__(self, tmp_path, upstreams: dict[str, Upstream], first: str) -> None:
        self.store = SessionStore(str(tmp_path / "sessions"), max_turns=100, max_bytes=1 << 20)
        self.client = http_client()
        self.runner = Runner(self.store, self.client, upstreams, first, None,
                             health=HealthBoard(lambda: 0.0, wall=lambda: 0))

    async def ask(self, prompt: str = "Hello there") -> list[replies.Reply]:
        got: list[replies.Reply] = []

        async def emit(reply: replies.Reply) -> None:
            got.append(reply)

        with trio.fail_after(timeout(30)):  # a hang guard
            await self.runner.ask(prompt, "s-resume", None, emit)
        return got


def upstream(name: str, url: str, settings: dict, fault: str | None = None,
             fallback: tuple[str, ...] = (), **more) -> Upstream:
    headers = {} if fault is None else {"x-mock-fault": fault,
                                        "x-mock-fault-key": f"k{next(keys)}"}
    if fault is not None and "stall" in fault:
        more["read_timeout"] = SHORT_READ
    return Upstream(provider(name, url, settings, headers=headers, **more), retries=0,
                    fallback=fallback, policy=Policy(30, 1800))


async def ask_alone(tmp_path, mock, kind: str, fault: str,
                    resume: str) -> tuple[Asker, list[replies.Reply]]:
    """One ask of provider p of this kind, whose answers break by fault."""
    asker = Asker(tmp_path, {"p": upstream("p", mock.url, PROTOCOLS[kind], fault,
                                           resume=resume)}, "p")
    async with asker.client:
        return asker, await asker.ask()


def one_answer(got: list[replies.Reply], failed: str, code: ErrorCode) -> replies.Failover:
    """Every character once, in order: the deltas, done's text and the history."""
    failover, = of_kind(got, replies.Failover)
    assert failover.failed == failed and failover.code is code
    before = "".join(r.text for r in got[:got.index(failover)] if type(r) is replies.Delta)
    assert before and failover.resumed_at == len(before)
    assert "".join(r.text for r in of_kind(got, replies.Delta)) == ENGLISH
    done = got[-1]
    assert type(done) is replies.Done and done.text == ENGLISH and done.kept, got
    return failover


def of_kind(got: list, cls) -> list:
    return [reply for reply in got if type(reply) is cls]


@pytest.mark.trio
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", PROTOCOLS)
async def test_a_broken_answer_goes_on_on_the_same_provider(tmp_path, mock, kind, fault):
    asker, got = await ask_alone(tmp_path, mock, kind, f"{fault},once", "same")
    failover = one_answer(got, "p", WHY[fault])
    assert failover.provider == "p"
    assert got[-1].attempts == 2
    turns = asker.store.load("s-resume")
    assert [turn.message.text for turn in turns[1:]] == [ENGLISH]  # one answer kept


@pytest.mark.trio
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_chat_answer_goes_on_on_an_anthropic_fallback(tmp_path, mock, fault):
    asker = Asker(tmp_path, {
        "chat": upstream("chat", mock.url, PROTOCOLS["chat"], fault, ("claude",)),
        "claude": upstream("claude", mock.url, PROTOCOLS["anthropic"])}, "chat")
    mock.clear()
    async with asker.client:
        got = await asker.ask()
    assert one_answer(got, "chat", WHY[fault]).provider == "claude"
    continuation = mock.requests()[-1]
    assert continuation["path"] == "/v1/messages"
    assert continuation["body"]["messages"][-1]["role"] == "assistant"  # a prefill


@pytest.mark.trio
@pytest.mark.parametrize("last", ["chat", "anthropic"])
@pytest.mark.parametrize("second, mode", [("drop", "fallback"), ("500", "fallback"),
                                          ("stall-start", "fallback"), ("401", "same")])
async def test_a_continuation_that_fails_before_it_says_more_is_taken_on(tmp_path, mock,
                                                                         second, mode, last):
    # q's continuation breaks before any new character (its repeat of the
    # cut sentence is all removed), answers 500, or sends nothing: r goes on
    # from the same character, with a splice of its own. A refused key
    # (401) goes on to r even where q's mode is "same": never q again.
    asker = Asker(tmp_path, {
        "p": upstream("p", mock.url, PROTOCOLS["chat"], "drop", ("q", "r"), resume="fallback"),
        "q": upstream("q", mock.url, PROTOCOLS["chat"], second, resume=mode),
        "r": upstream("r", mock.url, PROTOCOLS[last])}, "p")
    async with asker.client:
        got = await asker.ask()
    first, then = of_kind(got, replies.Failover)
    assert (first.failed, first.provider, then.failed, then.provider) == ("p", "q", "q", "r")
    before = "".join(r.text for r in got[:got.index(first)] if type(r) is replies.Delta)
    assert before and first.resumed_at == then.resumed_at == len(before), got
    assert "".join(r.text for r in of_kind(got, replies.Delta)) == ENGLISH
    done = got[-1]
    assert type(done) is replies.Done and done.text == ENGLISH and done.kept, got
    turns = asker.store.load("s-resume")
    assert [turn.message.text for turn in turns[1:]] == [ENGLISH]


@pytest.mark.trio
async def test_resumes_are_bounded_and_end_with_the_error(tmp_path, mock):
    asker, got = await ask_alone(tmp_path, mock, "anthropic", "drop", "same")
    assert [type(r).__name__ for r in got if type(r) is not replies.Delta] == \
        ["Started", "Failover", "Failover", "Error"]
    error = got[-1]
    assert error.code is ErrorCode.INTERRUPTED
    said = "".join(r.text for r in of_kind(got, replies.Delta))
    assert error.text == said and ENGLISH.startswith(said)  # each character once, still
    assert asker.store.load("s-resume") == []  # an ask that failed keeps nothing


@pytest.mark.trio
async def test_resume_off_ends_the_ask_as_before(tmp_path, mock):
    _, got = await ask_alone(tmp_path, mock, "chat", "drop,once", "off")
    assert not of_kind(got, replies.Failover)
    assert got[-1].code is ErrorCode.INTERRUPTED


# ---- the daemon, a speech device, a tool call ----

ANSWER = ("The kitchen light is on. The front door is locked. The heating is set to twenty "
          "degrees. The windows in the bedroom are closed. Is there anything else?")


def answer_for(fault: str) -> str:
    """ANSWER with a first sentence of its own: each test's speech told apart."""
    return f"Report number {FAULTS.index(fault) + 1} follows. {ANSWER}"
SPEAKER = "import sys; open(sys.argv[1], 'a').write(sys.argv[2] + chr(10))"
RELAY = ("import sys; open(sys.argv[1], 'a').write(' '.join(sys.argv[2:]) + chr(10)); "
         "print('relay', sys.argv[2], 'is', sys.argv[3])")
SCHEMA = {"type": "object", "properties": {"channel": {"type": "integer"},
                                           "on": {"type": "boolean"}},
          "required": ["channel", "on"]}


@pytest.fixture(scope="module")
def house(tmp_path_factory, mock):
    """A daemon with a speech device and a relay tool; its primaries are Chat
    providers that each break one way, their fallbacks Anthropic."""
    directory = tmp_path_factory.mktemp("house")
    providers = {}
    for fault in FAULTS:
        forced = {"x-mock-answer": json.dumps(answer_for(fault))}
        providers[f"chat-{fault}"] = {
            "headers": {**forced, "x-mock-fault": fault}, "fallback": [f"claude-{fault}"],
            **({"read_timeout": SHORT_READ} if fault == "stall" else {})}
        providers[f"claude-{fault}"] = {"protocol": "anthropic", "headers": forced}
    providers["chat-tools"] = {"headers": {"x-mock-fault": "cut-string"},
                               "fallback": ["claude-tools"]}
    providers["claude-tools"] = {"protocol": "anthropic"}
    # Three calls in one answer; the stream drops as the second begins.
    providers["claude-calls"] = {"protocol": "anthropic", "headers": {"x-mock-fault": "drop", "x-mock-tool-call": json.dumps(
        {"name": "set_relay", "arguments": json.dumps({"channel": 3, "on": True}), "count": 3})},
        "fallback": ["claude-tools"]}
    extra = "\n".join([
        "[devices.speaker]", 'type = "command"', 'events = ["sentence"]', "speech = true",
        f"argv = {toml_value([sys.executable, '-c', SPEAKER, str(directory / 'spoken'), '{text}'])}",
        "[devices.relay]", 'type = "command"', 'argv = ["true"]', "events = []",
        "tool_argv = " + toml_value({"set_relay": [sys.executable, "-c", RELAY,
                                                   str(directory / "relay"), "{channel}",
                                                   "{on}"]}),
        "tools = " + toml_value([{"name": "set_relay", "description": "Switch a relay",
                                  "parameters": SCHEMA}])])
    daemon = Daemon(directory, mock.url, providers=providers, extra=extra).start()
    yield daemon, directory
    assert daemon.stop() == 0, daemon.log()


def spoken(directory, sentences: list[str]) -> list[str]:
    """The sentences spoken from the first of these on (a sentence of one
    test alone), once as many were spoken (or a hang guard passed)."""
    path = directory / "spoken"
    deadline = time.monotonic() + timeout(30)
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        lines = lines[lines.index(sentences[0]):] if sentences[0] in lines else []
        if len(lines) >= len(sentences) or time.monotonic() > deadline:
            return lines
        time.sleep(0.02)


@pytest.mark.parametrize("fault", FAULTS)
def test_the_speech_device_says_every_sentence_once(house, fault):
    daemon, directory = house
    answer = answer_for(fault)
    with daemon.client(timeout(30)) as client:
        got = list(client.request("ask", prompt="Status please", provider=f"chat-{fault}",
                                  session=f"house-{fault}"))
        history = client.call("history", session=f"house-{fault}")
    text = "".join(r["text"] for r in of_type(got, "delta"))
    assert text == answer and of_type(got, "done")[0]["text"] == answer, got
    failover, = of_type(got, "failover")
    assert failover["failed"] == f"chat-{fault}" and failover["provider"] == f"claude-{fault}"
    assert 0 < failover["resumed_at"] < len(answer)
    # the answer goes on and is kept: its failover says what broke, not that it was lost
    assert "not kept" not in failover["message"], failover
    sentences = answer.replace(". ", ".\n").splitlines()
    assert spoken(directory, sentences) == sentences  # in order, each once
    assert [t["text"] for t in history["turns"] if t["role"] == "assistant"] == [answer]


def test_a_tool_call_cut_half_way_is_asked_for_again_and_runs_once(house):
    daemon, directory = house
    with daemon.client(timeout(30)) as client:
        got = list(client.request("ask", prompt="switch on relay 2", provider="chat-tools",
                                  session="house-tools"))
    failover, = of_type(got, "failover")
    assert failover["failed"] == "chat-tools" and failover["provider"] == "claude-tools"
    calls = of_type(got, "tool_call")
    assert [(c["name"], c["arguments"]) for c in calls] == \
        [("set_relay", {"channel": 2, "on": True})]
    assert "2 true\n" in relay_runs(directory)
    assert relay_runs(directory).count("2 true\n") == 1
    assert of_type(got, "done")[0]["steps"] == 2


def relay_runs(directory) -> list[str]:
    path = directory / "relay"
    return path.read_text().splitlines(keepends=True) if path.exists() else []


def test_complete_calls_of_a_broken_answer_end_its_step_and_it_goes_on(house):
    """The first call arrived whole and ran; the second, cut, is dropped;
    the fallback goes on from the first call's result."""
    daemon, directory = house
    with daemon.client(timeout(30)) as client:
        got = list(client.request("ask", prompt="Relays please", provider="claude-calls",
                                  session="house-calls"))
        history = client.call("history", session="house-calls")
    failover, = of_type(got, "failover")
    assert failover["provider"] == "claude-tools"
    assert failover["resumed_at"] == len("Calling set_relay.")
    assert [c["arguments"] for c in of_type(got, "tool_call")] == [{"channel": 3, "on": True}]
    assert relay_runs(directory).count("3 true\n") == 1
    done, = of_type(got, "done")
    assert done["steps"] == 2 and done["text"].startswith("Calling set_relay.Done.")
    calls = [t for t in history["turns"] if t["role"] == "assistant"][0]["tool_calls"]
    assert len(calls) == 1


# ---- the config keys ----

RESUME_CONFIG = """default_provider = "a"
[sessions]
max_resumes = 4
[providers.a]
protocol = "openai-chat"
base_url = "http://127.0.0.1:8080/v1"
model = "m"
resume = "same"
prefill = true
"""


def test_the_keys_reach_the_provider_and_the_limits():
    from agent.service.config import parse
    from agent.service.daemon import ask_limits_of
    config = parse(RESUME_CONFIG, "config.toml", {})
    made = config.providers["a"].provider
    assert (made.resume, made.prefill, made.continues_prefill()) == ("same", True, True)
    assert ask_limits_of(config).resumes == 4


@pytest.mark.parametrize("old, new, key", [
    ('resume = "same"', 'resume = "later"', "providers.a.resume"),
    ('protocol = "openai-chat"', 'protocol = "ollama"', "providers.a.prefill"),
    ("max_resumes = 4", "max_resumes = 17", "sessions.max_resumes"),
])
def test_a_bad_key_is_named(old, new, key):
    from agent.service.config import ConfigError, parse
    with pytest.raises(ConfigError) as caught:
        parse(RESUME_CONFIG.replace(old, new), "config.toml", {})
    assert caught.value.key == key, caught.value
