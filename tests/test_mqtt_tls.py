"""The board on a broker with TLS and passwords (tests/mosquitto.py makes
a throwaway CA): connected with the right password; with a wrong one the
refusal is named in status, the password never shown, and the daemon goes
on serving and trying."""

from __future__ import annotations

import json

import pytest

from daemon_harness import Daemon
from mosquitto import Broker, require_mosquitto
from test_wyoming_service import until_true

PASSWORD = "board-pass-1234"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    require_mosquitto()
    broker = Broker(tmp_path_factory.mktemp("tls-broker"), tls=True,
                    users={"board": PASSWORD}).start()
    yield broker
    broker.stop()


def board(directory, mock, broker: Broker, name: str, password: str) -> Daemon:
    (directory / "mqtt.pass").write_text(password + "\n")
    (directory / "mqtt.pass").chmod(0o600)
    settings = {"broker": broker.host, "port": broker.port, "board": name,
                "username": "board", "password_file": str(directory / "mqtt.pass"),
                "reconnect_max": 2.0}
    table = "[mqtt]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    table += f"[mqtt.tls]\nca_file = {json.dumps(str(broker.ca_file))}\n"
    return Daemon(directory, mock.url, extra=table).start()


def mqtt_status(daemon: Daemon) -> dict:
    with daemon.client() as client:
        return client.call("status")["mqtt"]


def test_tls_and_password_connect(tls_broker, mock, tmp_path):
    watcher = tls_broker.subscribe("homeagent/+/availability")
    daemon = board(tmp_path, mock, tls_broker, "secure", PASSWORD)
    try:
        watcher.wait("homeagent/secure/availability", lambda m: m.payload == b"online")
        status = mqtt_status(daemon)
        assert status["connected"] and status["broker"].startswith("mqtts://")
    finally:
        watcher.close()
        daemon.stop()
    assert PASSWORD not in daemon.log()


def test_a_wrong_password_is_named_and_retried(tls_broker, mock, tmp_path):
    wrong = "wrong-pass-5678"
    daemon = board(tmp_path, mock, tls_broker, "refused", wrong)
    try:
        until_true(lambda: mqtt_status(daemon)["reconnects"] >= 1)
        status = mqtt_status(daemon)
        assert not status["connected"] and status["connects"] == 0
        # Mosquitto answers a wrong password with "not authorized" (code 5)
        assert status["last_error"] == "connection refused: not authorized"
        with daemon.client() as client:
            assert client.call("status")["type"] == "status"  # still serving
    finally:
        daemon.stop()
    assert wrong not in daemon.log()
