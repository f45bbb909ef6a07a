"""`homeagent serve`: the daemon, where the parts are wired. It builds the
center (agent/core/center.py) with the runner, the toolbox with its tool
providers (the devices that have tools, the Home Assistant tool, the MCP
servers), the
device hub, and the doors (the socket API, Wyoming, MQTT, the microphone), and adds the
center's listeners in their stated order: the socket's subscribers, the
device hub, the MQTT board. One trio nursery holds the doors (and through
them every connection and ask), the devices, the signal handler, the
watchdog and the status reporter; one httpx.AsyncClient carries every
upstream request so keep-alive connections are reused. It is made at the
first request (LazyHttp): an idle daemon holds neither httpx nor a TLS
context.

Start: config (a bad one stops here, naming file, line and key), logging,
the history store, the listening socket (systemd's if it passed one), the
client cap within the descriptor limit (FD_RESERVE kept for the rest),
READY=1. SIGHUP: reload the config; a bad one is logged and the running one
kept; the socket settings apply at the next start. SIGTERM or SIGINT:
STOPPING=1, drain (asks get the grace time, then are cancelled, each client
told why), exit 0.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import resource
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass
from typing import Mapping

import trio

from agent import __version__, masking
from agent.api.server import GOODBYE_TIMEOUT, ApiServer, Limits
from agent.api.wire import PROTOCOL_VERSION
from agent.core.access import Access
from agent.core.center import Center
from agent.devices.hub import DeviceHub
from agent.service import log as logsetup
from agent.service.config import Config, ConfigError, load
from agent.service.systemd import Notifier, listen_fds, watchdog, watchdog_interval
from agent.session.runner import Runner, AskLimits, Upstream
from agent.session.store import Retention, SessionStore, StorageError
from agent.tools.base import Toolbox
from agent.tools.timers.provider import TimerTools
from agent.tools.timers.store import TimerStore, TimerStoreError

log = logging.getLogger("homeagent.daemon")

STATUS_INTERVAL = 10.0   # seconds between STATUS= updates, when something changed
LISTEN_BACKLOG = 128
UPSTREAM_CONNECTIONS = 64  # open at once, at most
# Idle keep-alive connections per upstream host; an ask rarely needs more than one.
KEEPALIVE_CONNECTIONS = 8
KEEPALIVE_EXPIRY = 60.0
# Descriptors never given to clients: every upstream connection the pool may
# open, and room for history commits (a temporary file and its directory),
# devices, tool processes and logs.
FD_RESERVE = UPSTREAM_CONNECTIONS + 64


class StartupError(Exception):
    """The daemon cannot start: the message says why."""


def http_client():
    """The upstream client: its pool bounded, timeouts per request
    (stream_answer). Its transport is agent.providers.transport's, but where
    the environment names a proxy: httpx's own speaks to proxies."""
    import urllib.request

    import httpx

    if any(scheme != "no" for scheme in urllib.request.getproxies_environment()):
        return httpx.AsyncClient(timeout=None, limits=httpx.Limits(
            max_connections=UPSTREAM_CONNECTIONS,
            max_keepalive_connections=KEEPALIVE_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY))
    from agent.providers.transport import UpstreamTransport

    return httpx.AsyncClient(timeout=None, transport=UpstreamTransport(
        max_connections=UPSTREAM_CONNECTIONS, max_keepalive=KEEPALIVE_CONNECTIONS,
        keepalive_expiry=KEEPALIVE_EXPIRY))


class LazyHttp:
    """What the runner streams through (httpx.AsyncClient.stream): the
    client is made at the first request, in a worker thread (importing
    httpx and loading the CA bundle take long on a board; the loop serves
    the other clients meanwhile), then every request goes straight to it."""

    def __init__(self) -> None:
        self._client = None
        self._making = trio.Lock()  # asks arriving together make one client

    def stream(self, *args, **kwargs):
        if self._client is not None:
            return self._client.stream(*args, **kwargs)
        return self._first_stream(*args, **kwargs)

    @contextlib.asynccontextmanager
    async def _first_stream(self, *args, **kwargs):
        async with self._making:
            if self._client is None:
                # A cancelled ask does not wait for it; the next one makes another.
                self._client = await trio.to_thread.run_sync(http_client, abandon_on_cancel=True)
        async with self._client.stream(*args, **kwargs) as response:
            yield response

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


@dataclass
class _Socket:
    listener: trio.SocketListener
    where: str
    created_path: str | None  # a path we bound and must remove at exit
    inode: tuple[int, int] | None = None


def main(config_path: str, environ: Mapping[str, str] = os.environ) -> int:
    try:
        config = load(config_path, environ)
    except ConfigError as exc:
        print(f"homeagent: {exc}", file=sys.stderr)
        return 2
    masking.install(masking.Masker(config.secrets()))
    logsetup.setup(config.daemon.log_level, environ=environ)
    _warn(config)
    try:
        trio.run(_serve, config, environ)
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        return 1
    return 0


def upstreams_of(config: Config) -> dict[str, Upstream]:
    return {name: Upstream(entry.provider, entry.retries, entry.fallback, entry.policy,
                           entry.retry_without_tools)
            for name, entry in config.providers.items()}


def retention_of(config: Config) -> Retention:
    sessions = config.sessions
    return Retention(sessions.memory_sessions, sessions.memory_bytes, sessions.unnamed_keep,
                     sessions.unnamed_max_age)


def ask_limits_of(config: Config) -> AskLimits:
    sessions = config.sessions
    return AskLimits(sessions.max_tool_steps, sessions.max_tool_calls,
                     sessions.max_tool_arguments, sessions.max_answer_bytes,
                     sessions.max_resumes)


async def _serve(config: Config, environ: Mapping[str, str]) -> None:
    # Signals are caught from the start (queued until the daemon reads them):
    # a SIGTERM right after READY=1 must drain, not kill with the default action.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        try:
            store = SessionStore(os.path.join(config.daemon.state_directory, "sessions"),
                                 max_turns=config.sessions.max_turns,
                                 max_bytes=config.sessions.max_bytes,
                                 retention=retention_of(config))
        except StorageError as exc:
            raise StartupError(f"the state directory is not usable: {exc}") from None
        bound = _listen(config, environ)
        client = LazyHttp()
        try:
            await _Daemon(config, environ, store, bound, client).run(signals)
        finally:
            with trio.CancelScope(shield=True):
                await client.aclose()
            _unlink(bound)
            log.info("stopped")


class _Daemon:
    """The running daemon's parts, and what signals do to them."""

    def __init__(self, config: Config, environ: Mapping[str, str], store: SessionStore,
                 bound: _Socket, client: LazyHttp) -> None:
        daemon = config.daemon
        self.config = config
        self.environ = environ
        self.store = store
        self.bound = bound
        self.notifier = Notifier.from_environ(environ)
        self.started = time.monotonic()
        # what `homeagent reload` waits for: the count of reloads done, and
        # why the last one was refused (None: it was applied)
        self.reloads = 0
        self.reload_error: str | None = None
        self.devices = DeviceHub(config.devices, daemon.max_announce_chars)
        # Tool providers in this order: a tool name offered twice is the first's.
        self.toolbox = Toolbox()
        for provider in self.devices.providers():
            self.toolbox.add(provider)
        self.tool_providers = [spec.build() for spec in config.tool_providers.values()]
        # MCP servers last: their tools never shadow a device's or Home Assistant's
        if config.mcp:
            from agent.tools.mcp.provider import McpServer

            self.tool_providers += [McpServer(server) for server in config.mcp.values()]
        for provider in self.tool_providers:
            self.toolbox.add(provider)
        self.runner = Runner(store, client, upstreams_of(config), config.default_provider,
                             config.sessions.system_prompt, self.toolbox,
                             ask_limits_of(config))
        self.center = Center(self.runner)
        self.center.speech = self.devices
        # the built-in timers and reminders, unless [timers] enabled = false
        self.timers = None
        if config.timers.enabled:
            try:
                self.timers = TimerTools(config.timers, TimerStore(
                    os.path.join(daemon.state_directory, "timers")), self.center)
            except TimerStoreError as exc:
                raise StartupError(f"the state directory is not usable: {exc}") from None
            self.toolbox.add(self.timers)
            self.center.alarms = self.timers
        self.client_ceiling = client_ceiling()
        self.server = ApiServer(self.center, server_name=f"homeagent {__version__}",
                                access=Access(daemon.allow_users, daemon.allow_groups),
                                limits=self.limits(daemon), status_extra=self.status_extra,
                                timers=self.timers)
        # Home Assistant's conversation agent, when [wyoming] listen is set
        # (imported only then)
        self.wyoming = None
        if config.wyoming.listen:
            from agent.wyoming.service import ConversationService

            # its Unix socket's peers are let in as the socket API's are
            self.wyoming = ConversationService(self.center, config.wyoming, __version__,
                                               Access(daemon.allow_users, daemon.allow_groups))
        # the board on the house's MQTT broker, when [mqtt] broker or unix is set
        self.mqtt = None
        if config.mqtt.enabled:
            from agent.mqtt.service import MqttService

            self.mqtt = MqttService(self.center, config.mqtt, __version__, self.devices)
            self.center.boards = self.mqtt
            if self.timers is not None:
                self.timers.watch(self.mqtt.show_next_timer)
        # the board's ears, when [voice] is set (imported only then: the
        # wake word and VAD models load here, a missing extra stops the start)
        self.voice = None
        if config.voice.enabled:
            from agent.voice.service import VoiceService
            from agent.voice.wake import MissingExtra

            try:
                self.voice = VoiceService(self.center, config.voice,
                                          speaking=lambda: self.devices.speaking)
            except MissingExtra as error:
                raise StartupError(f"[voice]: {error}") from None
        # The listeners, in order: subscribers see a reply first; the devices
        # next, when there are any (at an answer's done they queue its last
        # sentences); the board last, so its state then reads speaking, not idle.
        self.center.add_listener(self.server.subscribers)
        if self.devices:
            self.center.add_listener(self.devices)
        if self.mqtt is not None:
            self.center.add_listener(self.mqtt)

    def limits(self, daemon) -> Limits:
        """The server's limits from the config, max_clients within what the
        descriptors allow."""
        if daemon.max_clients > self.client_ceiling:
            log.warning("daemon.max_clients %d: the descriptor limit (RLIMIT_NOFILE %d) "
                        "leaves room for %d clients; serving at most %d",
                        daemon.max_clients, _nofile(), self.client_ceiling,
                        self.client_ceiling)
        return Limits(daemon.max_line_bytes, daemon.client_queue,
                      min(daemon.max_clients, self.client_ceiling),
                      daemon.max_clients_per_user, daemon.delta_interval_ms / 1000)

    async def run(self, signals) -> None:
        config = self.config
        wyoming_listeners = []
        if self.wyoming is not None:
            from agent.wyoming.service import ListenError

            try:
                wyoming_listeners = await self.wyoming.listen()
            except ListenError as error:
                raise StartupError(str(error)) from None
        async with trio.open_nursery() as nursery:
            async def api(task_status=trio.TASK_STATUS_IGNORED) -> None:
                await self.server.serve([self.bound.listener], task_status=task_status)
                nursery.cancel_scope.cancel()  # drained: the helper tasks end too

            await nursery.start(api)
            await nursery.start(self.devices.run, self.center)
            for provider in self.tool_providers:
                await nursery.start(provider.run)
            if self.timers is not None:
                await nursery.start(self.timers.run)
            if wyoming_listeners:
                nursery.start_soon(self.wyoming.serve, wyoming_listeners)
            if self.mqtt is not None:
                nursery.start_soon(self.mqtt.run)
            if self.voice is not None:
                await nursery.start(self.voice.run)
            log.info("homeagent %s listening on %s; providers: %s (default %s)",
                     __version__, self.bound.where, ", ".join(config.providers),
                     config.default_provider)
            # What start-up made lives as long as the daemon: out of the
            # collector's way, so that a full collection (tens of ms with
            # it) walks only what the asks keep.
            gc.freeze()
            self.notifier.ready(f"listening on {self.bound.where}")
            interval = watchdog_interval(self.environ)
            if interval is not None:
                nursery.start_soon(watchdog, self.notifier, interval)
            nursery.start_soon(self.report_status)
            nursery.start_soon(self.handle_signals, signals, nursery)

    def status_extra(self) -> dict:
        config = self.config
        return {"server": f"homeagent {__version__}", "protocol": PROTOCOL_VERSION,
                "pid": os.getpid(), "uptime": round(time.monotonic() - self.started, 3),
                "reloads": self.reloads, "reload_error": self.reload_error,
                "config": config.path, "socket": self.bound.where,
                "default_provider": config.default_provider,
                "providers": [{**_provider_status(name, entry, config),
                               **self.runner.health.snapshot(name, entry.provider.model)}
                              for name, entry in config.providers.items()],
                "devices": self.devices.status(),
                "tool_providers": [provider.status() for provider in self.tool_providers
                                   if provider.kind != "mcp"],
                "mcp": [provider.status() for provider in self.tool_providers
                        if provider.kind == "mcp"],
                "wyoming": self.wyoming.status() if self.wyoming is not None else None,
                "mqtt": self.mqtt.status() if self.mqtt is not None else None,
                "voice": self.voice.status() if self.voice is not None else None,
                "timers": self.timers.status() if self.timers is not None else None,
                "tools": [tool.name for tool in self.toolbox.tools()],
                "tools_shadowed": self.toolbox.shadowed()}

    async def handle_signals(self, signals, nursery: trio.Nursery) -> None:
        # The loop keeps reading while the drain runs: a signal left unread
        # would go to its default action when the receiver closes.
        stopping = False
        async for signum in signals:
            name = signal.Signals(signum).name
            if stopping:
                log.info("%s: already stopping", name)
            elif signum == signal.SIGHUP:
                self.reload()
            else:
                stopping = True
                nursery.start_soon(self.stop, name, nursery)

    async def stop(self, name: str, nursery: trio.Nursery) -> None:
        grace = self.config.daemon.shutdown_grace
        log.info("%s: draining (%d asks in flight, grace %g s)", name,
                 len(self.server.statistics().active), grace)
        self.notifier.stopping(f"{name}: draining")
        await self.server.drain(grace, f"the daemon is stopping ({name})")
        # Connections normally close once their goodbye is written; one whose
        # client does not read is not waited for beyond this.
        await trio.sleep(GOODBYE_TIMEOUT * 2)
        nursery.cancel_scope.cancel()

    def reload(self) -> None:
        old = self.config
        self.notifier.reloading()
        try:
            new = load(old.path, self.environ)
        except ConfigError as exc:
            log.error("reload refused, the running configuration stays: %s", exc)
            self.reloads += 1
            self.reload_error = str(exc)
            self.notifier.ready("reload refused: bad configuration; running on the old one")
            return
        # The old keys too: an ask still running on one may have it echoed back.
        masking.install(masking.Masker(new.secrets() + old.secrets()))
        self.runner.configure(upstreams_of(new), new.default_provider,
                              new.sessions.system_prompt, ask_limits_of(new))
        self.server.reconfigure(access=Access(new.daemon.allow_users, new.daemon.allow_groups),
                                limits=self.limits(new.daemon))
        self.store.set_limits(max_turns=new.sessions.max_turns,
                              max_bytes=new.sessions.max_bytes)
        self.store.set_retention(retention_of(new))
        logsetup.set_level(new.daemon.log_level)
        self.devices.max_announce_chars = new.daemon.max_announce_chars
        for key in ("socket", "socket_mode", "socket_group", "state_directory"):
            if getattr(new.daemon, key) != getattr(old.daemon, key):
                log.warning("reload: daemon.%s changed; it takes effect at the next start", key)
        if _device_settings(new) != _device_settings(old) or new.mcp != old.mcp:
            log.warning("reload: the devices or tool providers changed; they take effect at "
                        "the next start")
        self.config = new
        self.reloads += 1
        self.reload_error = None
        _warn(new)
        log.info("reloaded %s; providers: %s (default %s)", new.path, ", ".join(new.providers),
                 new.default_provider)
        self.notifier.ready(f"reloaded; providers: {', '.join(new.providers)}")

    async def report_status(self) -> None:
        last = None
        while True:
            await trio.sleep(STATUS_INTERVAL)
            stats = self.server.statistics()
            line = (f"{stats.clients} clients, {len(stats.active)} asks in flight, "
                    f"{stats.counters.answered} answered, {stats.counters.failed} failed")
            if line != last:
                self.notifier.status(line)
                last = line


def _warn(config: Config) -> None:
    for warning in config.warnings:
        log.warning("%s", warning)


def _nofile() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft


def client_ceiling() -> int:
    """How many client connections the descriptor limit leaves, after those
    open now and FD_RESERVE; a limit that leaves none stops the start."""
    soft = _nofile()
    if soft == resource.RLIM_INFINITY:
        return sys.maxsize
    in_use = len(os.listdir("/proc/self/fd"))
    ceiling = soft - in_use - FD_RESERVE
    if ceiling < 1:
        raise StartupError(f"the descriptor limit (RLIMIT_NOFILE {soft}) leaves none for "
                           f"clients: {in_use} are open and {FD_RESERVE} are kept for upstream "
                           "connections, history and devices; raise LimitNOFILE=")
    return ceiling


def _device_settings(config: Config) -> dict:
    return {name: (spec.common, dict(spec.settings))
            for name, spec in (*config.devices.items(), *config.tool_providers.items())}


def _provider_status(name: str, entry, config: Config) -> dict:
    # base_url holds no user:password@: the config refuses it
    provider = entry.provider
    return {"name": name, "protocol": provider.protocol, "model": provider.model,
            "base_url": provider.base_url, "default": name == config.default_provider,
            "key": bool(provider.api_key), "fallback": list(entry.fallback),
            # the cache field its requests carry (docs/caching.md), None for none
            "cache": provider.prompt_cache()}


# ---- the listening socket ----

def _listen(config: Config, environ: Mapping[str, str]) -> _Socket:
    activated = listen_fds(environ)
    if activated:
        if len(activated) > 1:
            log.warning("systemd passed %d sockets; serving the first", len(activated))
        sock = activated[0]
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            raise StartupError("the socket systemd passed is not a Unix stream socket")
        return _Socket(trio.SocketListener(trio.socket.from_stdlib_socket(sock)),
                       f"{sock.getsockname() or 'an unnamed socket'} (from systemd)", None)
    return _bind(config.daemon.socket, config.daemon.socket_mode, config.daemon.socket_gid)


def _bind(path: str, mode: int, gid: int | None) -> _Socket:
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StartupError(f"cannot create {directory}: {exc.strerror}") from None
    _remove_stale(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Born private, then opened to the group: never a moment at umask's mode.
    umask = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot bind {path}: {exc.strerror}") from None
    finally:
        os.umask(umask)
    try:
        if gid is not None:
            os.chown(path, -1, gid)
        os.chmod(path, mode)
    except OSError as exc:
        sock.close()
        os.unlink(path)
        raise StartupError(f"cannot set the owner or mode of {path}: {exc.strerror}") from None
    sock.listen(LISTEN_BACKLOG)
    info = os.stat(path)
    return _Socket(trio.SocketListener(trio.socket.from_stdlib_socket(sock)), path, path,
                   (info.st_dev, info.st_ino))


def _remove_stale(path: str) -> None:
    """A socket file left by a daemon that died is removed; one that still
    answers, or a file that is not a socket, stops the start."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise StartupError(f"{path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)
        return
    except OSError as exc:
        raise StartupError(f"{path} exists and cannot be checked: {exc.strerror}") from None
    finally:
        probe.close()
    raise StartupError(f"another daemon is listening on {path}")


def _unlink(bound: _Socket) -> None:
    """Remove our socket file, unless a newer daemon has bound the path since."""
    if bound.created_path is None:
        return
    try:
        info = os.lstat(bound.created_path)
        if (info.st_dev, info.st_ino) == bound.inode:
            os.unlink(bound.created_path)
    except FileNotFoundError:
        pass
