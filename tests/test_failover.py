"""Failover and health end to end: two real `homeagent mock-llm` processes
on loopback, the primary with faults set on the instance (refusing
connections, 500, stalling, 401, 429 with Retry-After, an error as the
first event), the fallback healthy. The runner runs in process with the
health board on a clock the test moves, so no cooldown is waited for; the
last two tests run the whole daemon (and the CLI) as processes.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest

from agent.core import replies
from agent.core.replies import ErrorCode
from agent.providers.health import HealthBoard, Policy
from agent.providers.requests import Provider
from agent.session.runner import Runner, Upstream
from agent.session.store import SessionStore
from agent.service.daemon import http_client  # the daemon's: our transport
from conftest import timeout
from daemon_harness import REPO, Daemon, MockServer, _env, ask_text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def backup():
    server = MockServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def primary_mock():
    server = MockServer.start()
    yield server
    server.stop()


@pytest.fixture
def primary(primary_mock):
    """The primary's mock, healthy again and without recorded requests after the test."""
    primary_mock.clear()
    yield primary_mock
    primary_mock.set_faults()


@pytest.fixture(scope="module")
def refusing():
    server = MockServer.start("--fault", "refuse")
    yield server
    server.stop()


def upstream(name: str, url: str, fallback: tuple[str, ...] = (), retries: int = 0,
             **provider) -> Upstream:
    return Upstream(Provider(name, "openai-chat", url + "/v1", f"{name}-model", **provider),
                    retries=retries, fallback=fallback, policy=Policy(30, 1800))


class Setup:
    def __init__(self, tmp_path, primary_url: str, backup_url: str) -> None:
        self.clock = Clock()
        self.store = SessionStore(str(tmp_path / "sessions"), max_turns=100, max_bytes=1 << 20)
        self.client = http_client()
        self.upstreams = {"primary": upstream("primary", primary_url, ("backup",)),
                          "backup": upstream("backup", backup_url)}
        self.runner = Runner(self.store, self.client, self.upstreams, "primary", None,
                             health=HealthBoard(self.clock, wall=lambda: 0))

    def replace(self, name: str, **settings) -> None:
        """The provider with these settings (Upstream's retries, Provider's others): a reload."""
        old = self.upstreams[name]
        self.upstreams[name] = upstream(name, old.provider.base_url.removesuffix("/v1"),
                                        old.fallback, **settings)
        self.runner.configure(self.upstreams, "primary", None)

    async def ask(self, prompt: str = "Hello there") -> list[replies.Reply]:
        got: list[replies.Reply] = []

        async def emit(reply: replies.Reply) -> None:
            got.append(reply)

        await self.runner.ask(prompt, None, None, emit)
        return got

    def health(self, name: str) -> dict:
        return self.runner.health.snapshot(name, f"{name}-model")


@pytest.fixture
async def setup(tmp_path, primary, backup):
    made = Setup(tmp_path, primary.url, backup.url)
    async with made.client:
        yield made


def shape(got: list[replies.Reply]) -> list[str]:
    """The reply types in order, runs of deltas as one."""
    types = []
    for reply in got:
        if not (types and types[-1] == reply.type == "delta"):
            types.append(reply.type)
    return types


def answered_by_backup(got: list[replies.Reply], code: ErrorCode) -> replies.Failover:
    """One clean answer from the backup after one failover from the primary."""
    assert shape(got) == ["started", "failover", "delta", "done"], got
    started, failover = got[0], got[1]
    assert (started.provider, started.model) == ("primary", "primary-model")
    assert (failover.failed, failover.code) == ("primary", code)
    assert (failover.provider, failover.model) == ("backup", "backup-model")
    assert got[-1].text == "".join(r.text for r in got if r.type == "delta")
    assert got[-1].attempts == 1  # the backup's request; the primary's are in its health
    return failover


@pytest.mark.trio
async def test_a_primary_answering_500_fails_over_cools_and_is_tried_after_its_cooldown(
        setup, primary, backup):
    primary.set_faults("500")
    failover = answered_by_backup(await setup.ask(), ErrorCode.UPSTREAM_HTTP)
    assert failover.status == 500 and "internal server error (mock)" in failover.message
    health = setup.health("primary")
    assert (health["state"], health["retry_in"]) == ("cooling", 30)
    assert health["last_error"] == "primary: HTTP 500: internal server error (mock)"
    assert health["counts"] == {"answered": 0, "failed": 1, "failovers": 1, "skipped": 0}
    assert setup.health("backup")["counts"]["answered"] == 1

    # Sticky: while it cools, asks go straight to the backup, the primary is not asked.
    asked = len(primary.requests())
    setup.clock.now += 29.9
    got = await setup.ask()
    assert shape(got) == ["started", "delta", "done"] and got[0].provider == "backup"
    assert len(primary.requests()) == asked
    assert setup.health("primary")["counts"]["skipped"] == 1

    # After its cooldown the next ask tries it; still failing, it cools twice as long.
    setup.clock.now += 0.1
    assert setup.health("primary")["state"] == "retrying"
    answered_by_backup(await setup.ask(), ErrorCode.UPSTREAM_HTTP)
    assert len(primary.requests()) == asked + 1
    assert setup.health("primary")["retry_in"] == 60

    # Healed: the try after the next cooldown is answered by the primary, healthy again.
    primary.set_faults()
    setup.clock.now += 60
    got = await setup.ask()
    assert shape(got) == ["started", "delta", "done"] and got[0].provider == "primary"
    health = setup.health("primary")
    assert (health["state"], health["failures_in_a_row"]) == ("healthy", 0)
    assert health["first_delta"]["samples"] == 1


@pytest.mark.trio
async def test_a_primary_refusing_connections_fails_over(tmp_path, refusing, backup):
    setup = Setup(tmp_path, refusing.url, backup.url)
    async with setup.client:
        failover = answered_by_backup(await setup.ask(), ErrorCode.UPSTREAM_UNAVAILABLE)
        assert "cannot connect" in failover.message
        assert setup.health("primary")["state"] == "cooling"


@pytest.mark.trio
@pytest.mark.parametrize("fault, settings, code, why", [
    # The stall never ends, so its read timeout cannot race anything.
    ("stall-start", {"read_timeout": 0.2}, ErrorCode.UPSTREAM_UNAVAILABLE, "read timeout"),
    ("error-first", {}, ErrorCode.PROVIDER_ERROR, "the model is overloaded (mock)")])
async def test_a_stall_or_an_error_as_the_first_event_fails_over(setup, primary, fault,
                                                                  settings, code, why):
    primary.set_faults(fault)
    if settings:
        setup.replace("primary", **settings)
    failover = answered_by_backup(await setup.ask(), code)
    assert why in failover.message
    assert setup.health("primary")["state"] == "cooling"


@pytest.mark.trio
@pytest.mark.parametrize("fault, code, why", [
    ("error-first", ErrorCode.PROVIDER_ERROR, "the model is overloaded (mock)"),
    ("500", ErrorCode.UPSTREAM_HTTP, "internal server error (mock)")])
async def test_an_ollama_primary_failing_first_fails_over(setup, primary, fault, code, why):
    # Ollama's native API: an {"error": ...} first line, or an HTTP error
    # with its {"error": "..."} body, blame the primary as the others do
    setup.upstreams["primary"] = Upstream(
        Provider("primary", "ollama", primary.url, "primary-model"), retries=0,
        fallback=("backup",), policy=Policy(30, 1800))
    setup.runner.configure(setup.upstreams, "primary", None)
    primary.set_faults(fault)
    failover = answered_by_backup(await setup.ask(), code)
    assert why in failover.message
    assert setup.health("primary")["state"] == "cooling"
    assert [r["path"] for r in primary.requests()] == ["/api/chat"]


@pytest.mark.trio
async def test_a_429_cools_for_its_retry_after(setup, primary):
    # Longer than stream_answer waits for: no retry, the error at once.
    primary.set_faults("429", retry_after=120)
    setup.replace("primary", retries=3)
    failover = answered_by_backup(await setup.ask(), ErrorCode.UPSTREAM_HTTP)
    assert failover.status == 429
    assert setup.health("primary")["retry_in"] == 120


@pytest.mark.trio
async def test_a_refused_key_disables_the_primary_until_a_reload(setup, primary):
    primary.set_faults("401")
    answered_by_backup(await setup.ask(), ErrorCode.UPSTREAM_HTTP)
    health = setup.health("primary")
    assert health["state"] == "disabled" and "reload" in health["disabled"]
    setup.clock.now += 10 ** 6  # no cooldown ends it
    asked = len(primary.requests())
    got = await setup.ask()
    assert got[0].provider == "backup" and len(primary.requests()) == asked

    # With its fallback disabled too: refused without a request.
    backup = setup.upstreams["backup"]
    setup.runner.health.get("backup", "backup-model", backup.policy,
                            backup).disable("HTTP 403: forbidden")
    [error] = await setup.ask()
    assert error.code is ErrorCode.PROVIDER_DISABLED
    assert "primary is disabled until the config is reloaded" in error.message
    assert len(primary.requests()) == asked

    primary.set_faults()
    setup.runner.configure(setup.upstreams, "primary", None)  # the reload
    assert setup.health("primary")["state"] == "healthy"
    assert (await setup.ask())[0].provider == "primary"


@pytest.mark.trio
async def test_no_failover_after_part_of_the_answer_was_sent_with_resume_off(setup, primary,
                                                                             backup):
    # With resume on (the default) the answer goes on: tests/test_resume.py.
    setup.replace("primary", resume="off")
    primary.set_faults("drop")  # the stream breaks after its first deltas
    backup.clear()
    got = await setup.ask()
    assert shape(got) == ["started", "delta", "error"], got
    assert got[-1].code is ErrorCode.INTERRUPTED and got[-1].text
    assert backup.requests() == []
    health = setup.health("primary")
    assert health["state"] == "cooling"  # its health still counts it
    assert health["counts"]["failovers"] == 0


@pytest.mark.trio
async def test_every_provider_cooling_still_tries_the_first(setup, primary, backup):
    primary.set_faults("500")
    await setup.ask()
    setup.runner.health.get("backup", "backup-model", Policy(30, 1800),
                            setup.upstreams["backup"]).failed("down")
    asked = len(primary.requests())
    got = await setup.ask()
    # The primary is tried though it cools (trying beats not answering); the
    # backup cools too, so the ask ends with the primary's error.
    assert shape(got) == ["started", "error"] and got[0].provider == "primary"
    assert len(primary.requests()) == asked + 1


@pytest.mark.trio
async def test_a_bad_request_does_not_fail_over(setup, backup):
    setup.replace("primary", headers={"x-mock-fault": "no-such-fault"})  # the mock's 400
    backup.clear()
    got = await setup.ask()
    assert shape(got) == ["started", "error"]
    assert (got[-1].code, got[-1].status) == (ErrorCode.UPSTREAM_HTTP, 400)
    assert backup.requests() == []
    assert setup.health("primary")["state"] == "healthy"  # the request's fault, not its


def test_the_daemon_fails_over_and_status_shows_the_primary_cooling(tmp_path, primary, backup):
    """The whole path with processes: `homeagent ask` and `homeagent status` as a user runs them."""
    primary.set_faults("500")
    daemon = Daemon(tmp_path, backup.url, default_provider="primary", providers={
        "primary": {"base_url": primary.url + "/v1", "retries": 0, "fallback": ["mock"]}})
    daemon.start()
    try:
        def cli(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([sys.executable, "-m", "agent.cli", *args, "--socket",
                                   daemon.socket_path], capture_output=True, text=True,
                                  env=_env(), cwd=REPO, timeout=timeout(30))

        asked = cli("ask", "Hello there")
        assert asked.returncode == 0, asked.stderr
        assert asked.stdout.strip()  # one clean answer
        assert ("homeagent: primary failed (primary: HTTP 500: internal server error (mock)); "
                "mock (mock-small) answers") in asked.stderr
        status = cli("status")
        assert status.returncode == 0, status.stderr
        assert "cooling until" in status.stdout
        assert "last error: primary: HTTP 500: internal server error (mock)" in status.stdout
        shown = json.loads(cli("status", "--json").stdout)
        health = {p["name"]: p for p in shown["providers"]}
        assert health["primary"]["state"] == "cooling"
        assert health["primary"]["fallback"] == ["mock"]
        assert health["mock"]["counts"]["answered"] == 1
        assert health["mock"]["first_delta"]["samples"] == 1
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_refused_key_disables_the_primary_until_sighup_reloads_the_config(tmp_path, primary,
                                                                            backup):
    primary.set_faults("401")
    daemon = Daemon(tmp_path, backup.url, default_provider="primary", providers={
        "primary": {"base_url": primary.url + "/v1", "fallback": ["mock"]}})
    daemon.start()
    try:
        with daemon.client() as client:
            _, got = ask_text(client, "Hello there")
            assert [r["type"] for r in got][:2] == ["started", "failover"]
            assert (got[1]["code"], got[1]["status"]) == ("upstream_http", 401)
            health = {p["name"]: p for p in client.call("status")["providers"]}["primary"]
            assert health["state"] == "disabled"
            assert health["last_error"] == "primary: HTTP 401: invalid API key (mock)"

            primary.set_faults()   # a new key, say
            daemon.signal(signal.SIGHUP)
            daemon.wait_notify(b"READY=1")
            health = {p["name"]: p for p in client.call("status")["providers"]}["primary"]
            assert health["state"] == "healthy"
            _, got = ask_text(client, "Hello there")
            assert got[0]["provider"] == "primary" and got[-1]["type"] == "done"
    finally:
        assert daemon.stop() == 0, daemon.log()
