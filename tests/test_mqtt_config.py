"""[mqtt] in the config (agent/service/config.py): defaults, checks, and the
password read from its file and masked like an API key."""

from __future__ import annotations

import socket

import pytest

from agent import masking
from agent.mqtt.topics import board_name
from agent.service.config import ConfigError, load
from agent.mqtt.config import MqttTls

LOCAL = """\
[providers.local]
protocol = "openai-chat"
base_url = "http://127.0.0.1:11434/v1"
model = "llama3.2"
"""
PASSWORD = "mqtt-pass-4242-x"


def load_mqtt(tmp_path, table: str, environ: dict | None = None):
    path = tmp_path / "config.toml"
    path.write_text(LOCAL + "[mqtt]\n" + table)
    return load(str(path), environ or {})


def test_off_by_default_and_the_defaults(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(LOCAL)
    assert not load(str(path), {}).mqtt.enabled
    mqtt = load_mqtt(tmp_path, 'broker = "mqtt.lan"\n').mqtt
    board = board_name(socket.gethostname())
    assert mqtt.enabled and (mqtt.broker, mqtt.port, mqtt.unix, mqtt.tls) == ("mqtt.lan", 1883,
                                                                               None, None)
    assert (mqtt.board, mqtt.client_id, mqtt.prefix) == (board, f"homeagent-{board}",
                                                         "homeagent")
    assert (mqtt.keepalive, mqtt.reconnect_min, mqtt.reconnect_max) == (60, 1.0, 60.0)
    assert (mqtt.max_payload, mqtt.max_asks, mqtt.deltas) == (16384, 4, False)
    assert (mqtt.discovery, mqtt.discovery_prefix) == (True, "homeassistant")


def test_tls_and_a_password_file(tmp_path):
    (tmp_path / "mqtt.pass").write_text(PASSWORD + "\n")
    (tmp_path / "mqtt.pass").chmod(0o600)
    config = load_mqtt(tmp_path, 'broker = "mqtt.lan"\nusername = "kitchen"\n'
                       'password_file = "mqtt.pass"\n[mqtt.tls]\nca_file = "ca.pem"\n')
    mqtt = config.mqtt
    assert mqtt.port == 8883 and mqtt.tls == MqttTls(str(tmp_path / "ca.pem"))
    assert mqtt.password == PASSWORD and PASSWORD not in repr(mqtt)
    assert PASSWORD in config.secrets()
    assert masking.Masker(config.secrets()).mask(f"refused {PASSWORD}") == "refused ***"


def test_a_password_from_a_systemd_credential(tmp_path):
    credentials = tmp_path / "creds"
    credentials.mkdir()
    (credentials / "credentials_mqtt.pass").write_text(PASSWORD)
    mqtt = load_mqtt(tmp_path, 'broker = "b"\nusername = "u"\n'
                     'password_file = "credentials/mqtt.pass"\n',
                     {"CREDENTIALS_DIRECTORY": str(credentials)}).mqtt
    assert mqtt.password == PASSWORD


@pytest.mark.parametrize("table, key, problem", [
    ('broker = "b"\nunix = "/run/m.sock"\n', "unix", "not both"),
    ('unix = "m.sock"\n', "unix", "absolute"),
    ('broker = "b"\nboard = "Kitchen"\n', "board", "a board name"),
    ('broker = "b"\nprefix = "a/b"\n', "prefix", "one topic level"),
    ('broker = "b"\ndiscovery_prefix = "+"\n', "discovery_prefix", "one topic level"),
    ('broker = "b"\nusername = "u"\npassword_file = "none.pass"\n', "password_file",
     "not found"),
    ('broker = "b"\nmax_payload = 10\n', "max_payload", ""),
    ('broker = "b"\nkeepalive = 1\n', "keepalive", ""),
    ('broker = "b"\nbogus = 1\n', "bogus", ""),
    ('broker = "b"\n[mqtt.tls]\ncert_file = "c.pem"\n', "ca_file", "CA"),
    ('broker = "b"\n[mqtt.tls]\nca_file = "ca.pem"\ncert_file = "c.pem"\n', "key_file",
     "cert_file and key_file"),
])
def test_bad_settings_name_their_key(tmp_path, table, key, problem):
    with pytest.raises(ConfigError) as caught:
        load_mqtt(tmp_path, table)
    assert key in str(caught.value) and problem in str(caught.value)


def test_a_password_without_a_username(tmp_path):
    (tmp_path / "p").write_text(PASSWORD)
    with pytest.raises(ConfigError) as caught:
        load_mqtt(tmp_path, 'broker = "b"\npassword_file = "p"\n')
    assert "needs a username" in str(caught.value) and PASSWORD not in str(caught.value)
