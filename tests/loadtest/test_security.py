"""`fastcoord loadtest` with the members' own TLS and SASL settings: the real command against
real `fastcoord serve` listeners (SASL_SSL with SCRAM-SHA-512, mutual TLS, SASL users), its
logins counted as SaslHandshake and SaslAuthenticate requests; a refused login counted as
an error while the run goes on, or, at the bootstrap, a refusal before anything starts;
settings that contradict each other refused in a line; and the open-file check counting
connections the way the fleet deals members to them per user."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections import Counter, defaultdict
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
import trio

from fastcoord.cli import build_parser
from fastcoord.client.fleet import Fleet
from fastcoord.client.login import ClientSecurity
from fastcoord.loadtest import run
from fastcoord.loadtest.stats import Recorder
from fastcoord.protocol.api_keys import ApiKey
from fastcoord.testing import Certificates, ServerProcess, certificates, fastcoord_server
from tests.interop.test_loadtest import FAST, SERVER_ARGS, loadtest, summary, table

from .test_faults import loadtest as refused_run
from .test_faults import refusal
from .test_nodes import options

# Real clients and servers, many of them: CI runs these once, in a job of their own.
pytestmark = pytest.mark.security

PASSED, EXCEEDED, CANNOT_START = run.PASSED, run.EXCEEDED, run.CANNOT_START
USERS = 5
SCRAM = "SCRAM-SHA-512"


@pytest.fixture
def certs(tmp_path: Path) -> Certificates:
    return certificates(tmp_path / "certs")


def secured_server(
    tmp_path: Path, certs: Certificates, *args: str
) -> AbstractContextManager[ServerProcess]:
    """`fastcoord serve` with `args` (its listeners, users), the test certificates and the
    interop tests' short timings, on loopback; stopped after the block."""
    directory = tmp_path / "server"
    directory.mkdir()
    return fastcoord_server(directory, *SERVER_ARGS, *certs.server_args(), *args)


def users(password: str = "pw", wrong: int | None = None) -> list[str]:
    """--user flags of user-0 .. user-4, user `wrong` with another password."""
    return [
        a
        for n in range(USERS)
        for a in ("--user", f"user-{n}:{'other' if n == wrong else password}")
    ]


def members_run(
    server: ServerProcess, listener: str, out: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """A short run of the loadtest against `listener`: 4 s, the interop tests' timings."""
    return loadtest(
        server.listener(listener), out, "--groups", "2", "--duration", "4", *FAST, *args
    )


def sasl_flags(protocol: str, user: str, password: str, *more: str) -> list[str]:
    return [
        "--security-protocol",
        protocol,
        "--sasl-mechanism",
        SCRAM,
        "--sasl-username",
        user,
        "--sasl-password",
        password,
        *more,
    ]


# -- runs -----------------------------------------------------------------------------------


def test_sasl_ssl_with_scram_sha_512_counts_each_login(tmp_path: Path, certs: Certificates) -> None:
    with secured_server(
        tmp_path, certs, "--listener", "SASL_SSL://127.0.0.1:0", "--user", "alice:s3cr3t-pw"
    ) as server:
        result = members_run(
            server,
            "SASL_SSL",
            tmp_path / "run",
            "--members",
            "10",
            "--members-per-connection",
            "2",
            *sasl_flags("sasl_ssl", "alice", "s3cr3t-pw", "--ssl-ca-location", str(certs.ca)),
        )
    assert result.returncode == PASSED, result.stdout + result.stderr
    s = summary(tmp_path / "run")
    assert s["outcome"] == "completed" and s["members"]["peak_stable"] == 10
    assert s["requests"]["errors"] == 0
    # Five connections of two members, one for each of the two groups' JoinGroups and
    # one for their SyncGroups, and the bootstrap's: a login each, SCRAM's two tokens a
    # SaslAuthenticate each, their latencies measured.
    handshakes, tokens = s["apis"]["SaslHandshake"], s["apis"]["SaslAuthenticate"]
    assert (handshakes["api_key"], handshakes["count"]) == (17, 10)
    assert (tokens["api_key"], tokens["count"]) == (36, 20)
    assert tokens["errors"] == handshakes["errors"] == {}
    assert 0 < tokens["p50_ms"] <= tokens["p99_ms"] < 5_000
    # The members' logins count in their coordinator's share; the bootstrap's in none.
    (node,) = s["nodes"].values()
    assert node["apis"]["SaslAuthenticate"]["count"] == 18
    assert "SaslAuthenticate" in result.stdout and "SaslHandshake" in result.stdout
    security = s["config"]["security"]
    assert (security["security_protocol"], security["sasl_mechanism"]) == ("sasl_ssl", SCRAM)
    assert "s3cr3t-pw" not in (tmp_path / "run" / "summary.json").read_text()


def test_ssl_with_a_client_certificate_when_the_listener_requires_one(
    tmp_path: Path, certs: Certificates
) -> None:
    chain, key = certs.clients["client"]
    tls = ["--security-protocol", "ssl", "--ssl-ca-location", str(certs.ca)]
    with secured_server(
        tmp_path, certs, "--listener", "SSL://127.0.0.1:0", "--ssl-client-auth", "required"
    ) as server:
        result = members_run(
            server,
            "SSL",
            tmp_path / "run",
            "--members",
            "6",
            *tls,
            "--ssl-certificate-location",
            str(chain),
            "--ssl-key-location",
            str(key),
        )
        assert result.returncode == PASSED, result.stdout + result.stderr
        s = summary(tmp_path / "run")
        assert s["members"]["peak_stable"] == 6 and s["requests"]["errors"] == 0
        assert not {"SaslHandshake", "SaslAuthenticate"} & s["apis"].keys()  # no SASL

        # Without the certificate the server refuses the TLS handshake: the run does not start.
        refused = members_run(server, "SSL", tmp_path / "refused", "--members", "6", *tls)
    assert refused.returncode == CANNOT_START, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        f"fastcoord loadtest: cannot reach the bootstrap {server.listener('SSL')}: TLS with "
        f"{server.listener('SSL')} failed: the server sent the TLS alert: certificate required"
    )
    assert not (tmp_path / "refused").exists()


def test_members_log_in_as_their_users_a_connection_per_user(
    tmp_path: Path, certs: Certificates
) -> None:
    with secured_server(
        tmp_path,
        certs,
        "--listener",
        "SASL_PLAINTEXT://127.0.0.1:0",
        *users(),
        "--log-level",
        "DEBUG",  # a line per login, with its principal
    ) as server:
        result = members_run(
            server,
            "SASL_PLAINTEXT",
            tmp_path / "run",
            "--members",
            "20",
            "--members-per-connection",
            "3",
            *sasl_flags("sasl_plaintext", "user-{n}", "pw", "--sasl-users", str(USERS)),
        )
        log = server.log()
    assert result.returncode == PASSED, result.stdout + result.stderr
    s = summary(tmp_path / "run")
    assert s["members"]["peak_stable"] == 20 and s["requests"]["errors"] == 0
    # Each user's 4 members on two connections (3 and 1): 10; each of the two groups has
    # members of every user, and two connections per user, for its JoinGroups and its
    # SyncGroups: 20; and the bootstrap's, user-0's.
    assert s["apis"]["SaslHandshake"]["count"] == 31
    logins = Counter(re.findall(r"logged in as User:(\S+) with SCRAM-SHA-512", log))
    # user-0 also for the parent's probe and the worker's bootstrap connection.
    assert logins == {"user-0": 8, "user-1": 6, "user-2": 6, "user-3": 6, "user-4": 6}


def test_a_wrong_password_is_counted_and_the_run_goes_on(
    tmp_path: Path, certs: Certificates
) -> None:
    flags = sasl_flags("sasl_ssl", "user-{n}", "pw", "--ssl-ca-location", str(certs.ca))
    with secured_server(
        tmp_path, certs, "--listener", "SASL_SSL://127.0.0.1:0", *users(wrong=3)
    ) as server:
        result = members_run(
            server,
            "SASL_SSL",
            tmp_path / "run",
            "--members",
            "20",
            "--members-per-connection",
            "3",
            "--max-error-rate",
            "0.01",
            *flags,
            "--sasl-users",
            str(USERS),
        )
        # A single user whose password is wrong: the bootstrap's login says so at once.
        single = [f if f != "user-{n}" else "user-3" for f in flags]
        refused = members_run(server, "SASL_SSL", tmp_path / "refused", "--members", "4", *single)
    # Ended on time, above the error limit: exit status 1.
    assert result.returncode == EXCEEDED, result.stdout + result.stderr
    s = summary(tmp_path / "run")
    assert s["outcome"] == "completed"
    failed = s["apis"]["SaslAuthenticate"]["errors"]
    assert list(failed) == ["SASL_AUTHENTICATION_FAILED"]
    # User 3's two connections fail, and their members try again after their backoff.
    assert failed["SASL_AUTHENTICATION_FAILED"] > 2
    assert s["apis"]["SaslHandshake"]["errors"] == {}
    assert s["requests"]["errors"] == failed["SASL_AUTHENTICATION_FAILED"]
    # A row each in the errors table, of no group: the login was a connection's.
    rows = [r for r in table(tmp_path / "run", "errors") if not r["signal"]]
    assert {(r["api"], r["error"], r["group"], r["member"]) for r in rows} == {
        ("SaslAuthenticate", "SASL_AUTHENTICATION_FAILED", "", "")
    }
    assert len(rows) == failed["SASL_AUTHENTICATION_FAILED"]
    # Members 3, 8, 13 and 18 are user 3's: never stable; the others unharmed.
    assert s["members"]["peak_stable"] == 16 and s["members"]["final"]["unjoined"] == 4
    assert "SASL_AUTHENTICATION_FAILED" in s["verdict"]["failures"][0]

    assert refused.returncode == CANNOT_START, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        f"fastcoord loadtest: cannot log in to the bootstrap {server.listener('SASL_SSL')} as "
        f"user-3 with {SCRAM}: SaslAuthenticate SASL_AUTHENTICATION_FAILED: Authentication "
        f"failed during authentication due to invalid credentials with SASL mechanism {SCRAM}"
    )
    assert not (tmp_path / "refused").exists()


def test_a_plaintext_run_against_a_sasl_listener_says_what_to_check(
    tmp_path: Path, certs: Certificates
) -> None:
    with secured_server(tmp_path, certs, "--listener", "SASL_PLAINTEXT://127.0.0.1:0") as server:
        refused = members_run(server, "SASL_PLAINTEXT", tmp_path / "run", "--members", "2")
    assert refused.returncode == CANNOT_START
    assert refused.stderr.strip().endswith(
        "is --bootstrap a listener of --security-protocol plaintext?"
    ), refused.stderr


# -- refusals -------------------------------------------------------------------------------

SASL_PLAIN = ["--security-protocol", "sasl_plaintext"]
ALICE = ["--sasl-username", "alice", "--sasl-password", "pw"]


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (
            ["--sasl-username", "alice"],
            "--sasl-username needs --security-protocol sasl_plaintext or sasl_ssl "
            "(it is plaintext)",
        ),
        (
            ["--security-protocol", "ssl", "--sasl-mechanism", "PLAIN", "--sasl-users", "3"],
            "--sasl-mechanism and --sasl-users need --security-protocol sasl_plaintext or "
            "sasl_ssl (it is ssl)",
        ),
        (
            [*SASL_PLAIN, *ALICE, "--ssl-ca-location", "ca.pem"],
            "--ssl-ca-location needs --security-protocol ssl or sasl_ssl (it is sasl_plaintext)",
        ),
        (
            ["--security-protocol", "sasl_ssl", "--sasl-username", "alice"],
            "--security-protocol sasl_ssl needs --sasl-password",
        ),
        (
            SASL_PLAIN,
            "--security-protocol sasl_plaintext needs --sasl-username and --sasl-password",
        ),
        (
            [*SASL_PLAIN, *ALICE, "--sasl-users", "5"],
            "--sasl-users 5 needs {n} in --sasl-username (user-{n}, say, for user-0 to user-4): "
            "every user would be alice",
        ),
        (
            ["--security-protocol", "ssl", "--ssl-key-location", "client.key"],
            "--ssl-key-location needs --ssl-certificate-location, the client certificate it is "
            "the key of",
        ),
    ],
)
def test_contradicting_settings_are_refused_in_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], reason: str
) -> None:
    assert refusal(capsys, refused_run(tmp_path, *flags)) == f"fastcoord loadtest: {reason}"
    assert not (tmp_path / "run").exists()


def test_tls_files_that_cannot_be_used_are_refused_in_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], certs: Certificates
) -> None:
    tls = ["--security-protocol", "ssl"]
    missing = tmp_path / "missing.pem"
    assert refusal(capsys, refused_run(tmp_path, *tls, "--ssl-ca-location", str(missing))) == (
        f"fastcoord loadtest: --ssl-ca-location {missing}: no such file"
    )
    not_pem = tmp_path / "notes.txt"
    not_pem.write_text("not a certificate\n")
    assert refusal(
        capsys, refused_run(tmp_path, *tls, "--ssl-ca-location", str(not_pem))
    ).startswith(f"fastcoord loadtest: --ssl-ca-location {not_pem}: cannot load CA certificates (")
    chain, _ = certs.clients["client"]
    mismatched = [
        "--ssl-ca-location",
        str(certs.ca),
        "--ssl-certificate-location",
        str(chain),
        "--ssl-key-location",
        str(certs.server),  # the server's key, not the client's
    ]
    assert refusal(capsys, refused_run(tmp_path, *tls, *mismatched)) == (
        f"fastcoord loadtest: --ssl-certificate-location {chain}, --ssl-key-location "
        f"{certs.server}: cannot load the client certificate and key (key values mismatch)"
    )
    assert not (tmp_path / "run").exists()


def test_choices_are_librdkafkas() -> None:
    parse = build_parser().parse_args
    args = parse(["loadtest"])
    assert (args.security_protocol, args.sasl_mechanism, args.sasl_users) == ("plaintext", None, 1)
    for bad in (
        ["--security-protocol", "tls"],
        ["--sasl-mechanism", "GSSAPI"],
        ["--ssl-endpoint-identification-algorithm", "http"],
        ["--sasl-users", "0"],
    ):
        with pytest.raises(SystemExit):
            parse(["loadtest", *bad])


# -- the open-file check --------------------------------------------------------------------


HELD = (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP)  # what a group's own connections carry


def fleet_connections(o: run.Options, worker: int, nodes: int) -> int:
    """The connections worker `worker`'s fleet would open: its members' shares (one per
    node among the groups of a share's members, as connections_per_worker counts them),
    and when they share, two per group and user for what the coordinator holds (its
    JoinGroups and its SyncGroups)."""
    held: set[tuple[int, int, int]] = set()

    async def shares() -> dict[int, list[int]]:
        fleet = Fleet(run.fleet_config(o, ("127.0.0.1", 9092)), Recorder(worker))
        try:
            groups: defaultdict[int, list[int]] = defaultdict(list)
            for i in range(worker, o.members, o.processes):
                seat = fleet.add("g", number=i)
                group = i * o.groups // o.members
                groups[seat.share].append(group)
                held.update((group, seat.share % o.security.users, api) for api in HELD)
            return groups
        finally:
            fleet._poller.close()

    shared = sum(min(max(g) - min(g) + 1, nodes) for g in trio.run(shares).values())
    return shared + (len(held) if o.members_per_connection > 1 else 0)


@pytest.mark.parametrize("sasl_users", [1, 2, 5])
@pytest.mark.parametrize("per_connection", [1, 3, 4])
def test_the_open_file_check_counts_the_fleets_connections(
    sasl_users: int, per_connection: int
) -> None:
    security = ClientSecurity("sasl_plaintext", None, "user-{n}", "pw", sasl_users=sasl_users)
    for processes in (1, 3):
        o = dataclasses.replace(options(47, 7, per_connection, processes), security=security)
        for nodes in (1, 3):
            expected = [fleet_connections(o, n, nodes) for n in range(processes)]
            assert run.connections_per_worker(o, nodes) == expected, (processes, nodes)
