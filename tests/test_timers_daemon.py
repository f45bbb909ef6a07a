"""Timers in a real daemon: `homeagent serve` and the mock model as
processes (tests/daemon_harness.py), the model's timer_set call scripted by
the mock's x-mock-tool-call header, a speech device that is a command
device appending each sentence it is given to a file (the board's speech:
what a voice would say), a serial board on a real pty
(tests/test_serial_daemon.py) and a real Mosquitto (tests/mosquitto.py).

Nothing here measures time: short real timers, and timeout() only as the
bound of a hang.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from conftest import timeout
from daemon_harness import REPO, Daemon, child_env, toml_value
from mosquitto import broker  # noqa: F401 (a fixture)
from test_mqtt_daemon import PREFIX, is_json, mqtt_table, payload, topic
from test_serial_daemon import SerialBoard, Subscriber, board_toml, wait_until

WRITE_LINE = ("import sys; open(sys.argv[1], 'a', encoding='utf-8')"
              ".write(sys.argv[2] + '\\n')")


def provider(seconds: float, label: str = "tea") -> dict:
    """A provider whose model calls timer_set once, then confirms."""
    call = {"name": "timer_set", "arguments": json.dumps({"seconds": seconds, "label": label})}
    return {"headers": {"x-mock-tool-call": json.dumps(call)}}


def speech_toml(path) -> str:
    return "\n".join(["[devices.voice]", 'type = "command"', 'events = ["sentence"]',
                      "speech = true",
                      f"argv = {toml_value([sys.executable, '-c', WRITE_LINE, str(path), '{text}'])}"])


def timer_daemon(directory, mock, *, seconds: float, extra: str = "", **kwargs) -> Daemon:
    said = directory / "said.txt"
    return Daemon(directory, mock.url, providers={"timer": provider(seconds)},
                  extra="\n".join([speech_toml(said),
                                   "[timers]\nring_limit_seconds = 600\nring_interval_seconds = 1",
                                   extra]), **kwargs)


def spoken(daemon: Daemon) -> list[str]:
    said = daemon.dir / "said.txt"
    return said.read_text(encoding="utf-8").splitlines() if said.exists() else []


def ask_for_timer(daemon: Daemon) -> list[dict]:
    with daemon.client() as client:
        replies = list(client.request("ask", prompt="a tea timer please", provider="timer"))
    results = [r for r in replies if r["type"] == "tool_result"]
    assert results and not results[0].get("is_error"), replies
    return replies


def timers(daemon: Daemon, **fields) -> dict:
    with daemon.client() as client:
        return client.call("timers", **fields)


def cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agent.cli", "timers", *args,
                           "--socket", daemon.socket_path], capture_output=True, text=True,
                          env=child_env(), cwd=REPO, timeout=timeout(30))


def test_a_timer_survives_kill_9_and_rings_at_start_saying_how_late(tmp_path, mock):
    daemon = timer_daemon(tmp_path, mock, seconds=2).start()
    try:
        ask_for_timer(daemon)
        [timer] = timers(daemon)["timers"]
        assert (timer["id"], timer["label"], timer["set_by"]) == ("t1", "tea", "client 1")
        daemon.process.send_signal(signal.SIGKILL)
        daemon.stop()  # reaps it
        wait_until(lambda: time.time() > timer["due"] + 3, "the timer came due while down", 30)
        daemon.start()
        late = wait_until(lambda: [s for s in spoken(daemon) if "late" in s],
                          "the ring with how late it was", 30)
        assert late[0].startswith("It rang ") and "seconds late" in late[0]
        assert "Timer tea is done." in spoken(daemon)
        with daemon.client() as client:
            assert client.call("stop")["type"] == "stopped"
        wait_until(lambda: "ringing ended, stopped" in daemon.log(), "the ring stopped", 20)
        assert timers(daemon)["timers"] == []
    finally:
        daemon.stop()


def test_the_socket_op_and_the_cli_list_and_cancel(tmp_path, mock):
    daemon = timer_daemon(tmp_path, mock, seconds=3600).start()
    try:
        ask_for_timer(daemon)
        listed = cli(daemon, "list")
        assert listed.returncode == 0 and "t1  timer" in listed.stdout \
            and listed.stdout.rstrip().endswith("tea"), listed
        as_json = json.loads(cli(daemon, "--json").stdout)
        assert [t["id"] for t in as_json["timers"]] == ["t1"]
        cancelled = cli(daemon, "cancel", "t1")
        assert (cancelled.returncode, cancelled.stdout) == (0, "cancelled timer t1 (tea)\n")
        again = cli(daemon, "cancel", "t1")
        assert again.returncode == 1 and "(unknown_timer)" in again.stderr
        reply = timers(daemon, cancel="t9")
        assert (reply["type"], reply["code"]) == ("error", "unknown_timer")
        assert timers(daemon) == {"id": 1, "type": "timers", "timers": []}
        assert ask_for_timer(daemon)  # the file was written: a restart keeps the new one
        daemon.stop()
        daemon.start()
        assert [t["id"] for t in timers(daemon)["timers"]] == ["t2"]
    finally:
        daemon.stop()


def test_timers_off_by_config(tmp_path, mock):
    daemon = Daemon(tmp_path, mock.url, extra="[timers]\nenabled = false").start()
    try:
        reply = timers(daemon)
        assert (reply["type"], reply["code"]) == ("error", "timers_disabled")
        with daemon.client() as client:
            status = client.call("status")
        assert status["timers"] is None and "timer_set" not in status["tools"]
    finally:
        daemon.stop()


def test_a_timer_set_on_a_serial_board_rings_there_until_its_stop(tmp_path, mock):
    board = SerialBoard(tmp_path / "usb-Board-if00-port0").plug()
    daemon = timer_daemon(tmp_path, mock, seconds=1, default_provider="timer",
                          extra=board_toml(board.link))
    daemon.start()
    subscriber = Subscriber(daemon)
    try:
        board.wait_for(lambda lines: any(x.startswith("HELLO") for x in lines), "HELLO", 20)
        board.write("PROMPT set a tea timer\n")
        # the board's answer, on its lines
        board.wait_for(lambda lines: any(x.startswith("DONE") for x in lines), "DONE", 30)
        wait_until(lambda: "Timer tea is done." in spoken(daemon), "the ring", 30)
        assert "timer t1 (tea) set by device board" in daemon.log()
        # the board shows the ring (its default events), a subscriber sees it
        board.wait_for(lambda lines: "TIMER ringing t1 timer tea" in lines, "TIMER ringing", 20)
        board.write("STOP\n")
        wait_until(lambda: "ringing ended, stopped" in daemon.log(), "the STOP ended it", 20)
        board.wait_for(lambda lines: "TIMER quiet t1 timer tea" in lines, "TIMER quiet", 20)
        with daemon.client() as client:
            assert client.call("status")["timers"]["ringing"] == []
        rings = subscriber.wait_for(
            lambda replies: sum(r["type"] == "timer" for r in replies) == 2, "two notices", 20)
        assert [r for r in rings if r["type"] == "timer"] == [
            {"type": "timer", "state": state, "timer": "t1", "kind": "timer", "label": "tea",
             "id": "sub"} for state in ("ringing", "quiet")]
    finally:
        subscriber.close()
        daemon.stop()
        board.unplug()


def test_the_next_timer_is_a_retained_topic_and_a_timestamp_sensor(tmp_path, mock, broker):
    watcher = broker.subscribe(f"{PREFIX}/#", "homeassistant/#")
    daemon = timer_daemon(tmp_path, mock, seconds=3600, extra=mqtt_table(broker, "kitchen"))
    daemon.start()
    try:
        sensor = payload(watcher.wait("homeassistant/sensor/kitchen/next_timer/config"))
        assert (sensor["device_class"], sensor["state_topic"]) == (
            "timestamp", topic("kitchen", "next_timer/at"))
        # unavailable while no timer is set: its state topic never says null
        assert [a["topic"] for a in sensor["availability"]] == [
            topic("kitchen", "availability"), topic("kitchen", "next_timer")]
        assert "availability_topic" not in sensor
        watcher.wait(topic("kitchen", "next_timer"), is_json(id=None))
        ask_for_timer(daemon)
        shown = payload(watcher.wait(topic("kitchen", "next_timer"), is_json(id="t1")))
        assert shown["label"] == "tea" and shown["at"][10] == "T"  # ISO 8601 with offset
        assert watcher.wait(topic("kitchen", "next_timer/at")).payload.decode() == shown["at"]
        late = broker.subscribe(topic("kitchen", "next_timer"), topic("kitchen", "next_timer/at"))
        try:
            assert late.wait(topic("kitchen", "next_timer")).retained
            assert late.wait(topic("kitchen", "next_timer/at")).retained
        finally:
            late.close()
        timers(daemon, cancel="t1")
        watcher.wait(topic("kitchen", "next_timer"), is_json(id=None),
                     after=len(watcher.messages))
    finally:
        daemon.stop()
        watcher.close()
