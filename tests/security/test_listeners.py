"""Listeners, users and secrets as the configuration reads them: what is accepted, what is
refused at start with the setting's name, and what --print-config never shows."""

from __future__ import annotations

import pytest

from fastcoord import config
from fastcoord.config import ConfigError
from fastcoord.security import credentials


def test_no_listeners_is_one_plaintext_listener_at_host_and_port() -> None:
    (listener,) = config.load(None, {"port": "9093"}).listener_list()
    assert (listener.name, listener.protocol, listener.host, listener.port) == (
        "PLAINTEXT",
        "PLAINTEXT",
        "127.0.0.1",
        9093,
    )


def test_listeners_take_their_protocol_mechanisms_and_client_auth() -> None:
    cfg = config.load(
        None,
        {
            "listeners": ["PLAINTEXT://127.0.0.1:0,CLIENTS://127.0.0.1:9094", "SSL://[::1]:9095"],
            "listener.security.protocol.map": "CLIENTS:SASL_SSL",
            "listener.name": [
                "clients.sasl.enabled.mechanisms=SCRAM-SHA-512",
                "ssl.ssl.client.auth=required",
            ],
            "ssl.keystore.location": "server.pem",
        },
    )
    plain, clients, ssl = cfg.listener_list()
    assert plain.protocol == "PLAINTEXT" and not plain.tls and not plain.sasl
    assert (clients.name, clients.protocol, clients.port) == ("CLIENTS", "SASL_SSL", 9094)
    assert clients.mechanisms == ("SCRAM-SHA-512",) and clients.tls and clients.sasl
    assert clients.client_auth == "none"
    assert (ssl.host, ssl.client_auth, ssl.mechanisms) == ("::1", "required", ())


def test_the_file_names_a_listeners_own_settings_as_kafka_does(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "fastcoord.toml"
    path.write_text(
        'listeners = ["SASL_PLAINTEXT://127.0.0.1:0"]\n'
        "[listener.name.sasl_plaintext]\n"
        '"sasl.enabled.mechanisms" = ["PLAIN", "SCRAM-SHA-256"]\n'
    )
    (listener,) = config.load(str(path)).listener_list()
    assert listener.mechanisms == ("PLAIN", "SCRAM-SHA-256")


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"listeners": ["PLAINTEXT//127.0.0.1:1"]}, "listeners"),
        ({"listeners": ["PLAINTEXT://127.0.0.1:1", "PLAINTEXT://127.0.0.1:2"]}, "named twice"),
        ({"listeners": ["OTHER://127.0.0.1:1"]}, "listener.security.protocol.map"),
        ({"listeners": ["SSL://127.0.0.1:1"]}, "ssl.keystore.location"),
        (
            {
                "listeners": ["SASL_SSL://127.0.0.1:1"],
                "ssl.keystore.location": "x",
                "sasl.enabled.mechanisms": "GSSAPI",
            },
            "sasl.enabled.mechanisms",
        ),
        (
            {
                "listener.name": ["sasl_ssl.ssl.client.auth=sometimes"],
                "listeners": ["SASL_SSL://127.0.0.1:1"],
                "ssl.keystore.location": "x",
            },
            "ssl.client.auth",
        ),
        (
            {
                "listener.name": ["plaintext.group.max.size=3"],
                "listeners": ["PLAINTEXT://127.0.0.1:1"],
            },
            "not a per-listener setting",
        ),
        (
            {"listener.security.protocol.map": "A:NOPE", "listeners": ["A://127.0.0.1:1"]},
            "listener.security.protocol.map",
        ),
        ({"user": ["nopassword"]}, "NAME:PASSWORD"),
        ({"user": ['{"name": "a", "password": "p", "iterations": 10}']}, "iterations"),
        ({"user": ['{"name": "a", "mechanisms": ["GSSAPI"], "password": "p"}']}, "mechanisms"),
        ({"user": ["a:p", "a:q"]}, "given twice"),
        ({"super.users": "alice"}, "super.users"),
        ({"authorizer.class.name": "com.example.Mine"}, "authorizer.class.name"),
        ({"cluster": "0@127.0.0.1:1", "listeners": ["PLAINTEXT://127.0.0.1:1"]}, "cluster"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_it(
    values: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        config.load(None, values)


def test_a_password_is_kept_only_as_credentials() -> None:
    cfg = config.load(
        None,
        {
            "user": [
                "alice:s3cret-pw",
                '{"name": "bob", "password": "pw2", "mechanisms": ["SCRAM-SHA-512"]}',
            ]
        },
    )
    alice, bob = cfg.user
    assert alice.password is None and bob.password is None
    assert alice.plain is not None and alice.scram_sha_256 is not None
    assert alice.scram_sha_512 is not None
    assert credentials.plain_matches(alice.plain, "s3cret-pw")
    assert not credentials.plain_matches(alice.plain, "s3cret-pX")
    assert bob.plain is None and bob.scram_sha_256 is None and bob.scram_sha_512 is not None
    printed = config.to_toml(cfg)
    assert "s3cret-pw" not in printed and "pw2" not in printed
    # What --print-config gives is a configuration that loads again, to the same users.
    again = config.load(None, {"user": [_user_json(u) for u in cfg.user]})
    assert again.user == cfg.user


def _user_json(user: object) -> str:
    import msgspec

    return msgspec.json.encode(user).decode()


def test_print_config_never_shows_the_key_password() -> None:
    printed = config.to_toml(config.load(None, {"ssl.key.password": "hunter2"}))
    assert "hunter2" not in printed
    assert "# ssl.key.password is set (not shown)" in printed
