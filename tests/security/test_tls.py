"""TLS over the connection's raw descriptor: a Python ssl client (hostname verification on)
talks to handshake() and TlsTransport over loopback TCP, and the server side reads and
writes as the connection does, waiting through Trio only on BlockingIOError.

Certificates come from trustme; the principal strings were checked against Java 17's
X500Principal.getName() on the same certificates."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import struct
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID

from fastcoord.security.tls import (
    ANONYMOUS,
    SEND_CHUNK,
    HandshakeFailed,
    TlsFailure,
    TlsTransport,
    client_context,
    handshake,
    looks_like_tls,
    principal_of,
    rfc2253_name,
    server_context,
)

TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Pki:
    ca: str  # the CA certificate
    chain: str  # the server's key and certificate chain in one file
    cert: str  # the server's certificate chain alone
    key: str  # the server's private key alone
    encrypted_key: str  # the same key, encrypted with "secret"
    client_cert: str  # alice's, from the same CA
    client_key: str
    stranger_cert: str  # mallory's, key included, from another CA
    stranger_ca: str


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    alice = ca.issue_cert(
        "alice@example.org",
        common_name="alice",
        organization_name="Example, Inc.",
        organization_unit_name="eng",
    )
    other = trustme.CA()
    mallory = other.issue_cert("mallory@example.org", common_name="mallory")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    other.cert_pem.write_to_path(str(d / "other-ca.pem"))
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    with open(d / "server-cert.pem", "wb") as f:
        for blob in server.cert_chain_pems:
            f.write(blob.bytes())
    server.private_key_pem.write_to_path(str(d / "server-key.pem"))
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    (d / "server-key-enc.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    alice.cert_chain_pems[0].write_to_path(str(d / "alice.pem"))
    alice.private_key_pem.write_to_path(str(d / "alice-key.pem"))
    mallory.private_key_and_cert_chain_pem.write_to_path(str(d / "mallory.pem"))
    return Pki(
        ca=str(d / "ca.pem"),
        chain=str(d / "server.pem"),
        cert=str(d / "server-cert.pem"),
        key=str(d / "server-key.pem"),
        encrypted_key=str(d / "server-key-enc.pem"),
        client_cert=str(d / "alice.pem"),
        client_key=str(d / "alice-key.pem"),
        stranger_cert=str(d / "mallory.pem"),
        stranger_ca=str(d / "other-ca.pem"),
    )


def serving(pki: Pki, client_auth: str = "none") -> ssl.SSLContext:
    return server_context(pki.chain, None, None, pki.ca, client_auth)


def alice(pki: Pki, **kwargs: Any) -> ssl.SSLContext:
    return client_context(pki.ca, pki.client_cert, pki.client_key, **kwargs)


def run(fn: Callable[[], Awaitable[None]], **kwargs: Any) -> None:
    trio.run(fn, **kwargs)


# -- plumbing: a loopback pair, the caller's loops --------------------------------------------


@asynccontextmanager
async def tcp_pair(sndbuf: int | None = None) -> AsyncIterator[tuple[socket.socket, Any]]:
    """(the server's non-blocking socket, the client's trio socket), over loopback TCP."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = trio.socket.socket()
    if sndbuf is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, sndbuf)
    await client.connect(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    server.setblocking(False)
    if sndbuf is not None:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    try:
        yield server, client
    finally:
        server.close()
        client.close()


async def read_some(t: TlsTransport) -> bytes:
    """What the connection's reader does: read, and wait only when it would block."""
    while True:
        try:
            return t.recv(65536)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(t.fd)


async def write_all(t: TlsTransport, data: bytes | bytearray) -> None:
    """What the connection's writer does: send what the socket takes, wait for the rest."""
    out = bytearray(data)
    while out:
        try:
            del out[: t.send(out)]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(t.fd)
    while not t.flush():
        await trio.lowlevel.wait_writable(t.fd)


async def receive_exactly(stream: trio.abc.ReceiveStream, size: int) -> bytes:
    got = bytearray()
    while len(got) < size:
        chunk = await stream.receive_some(1 << 20)
        assert chunk, f"the server's stream ended after {len(got)} of {size} bytes"
        got += chunk
    return bytes(got)


class BioClient:
    """A client over memory buffers, for what trio.SSLStream will not do: send its Finished
    and a request in one segment, or the alert that says why its handshake failed."""

    def __init__(self, sock: Any, ctx: ssl.SSLContext) -> None:
        self.sock = sock
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.sslobj = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")

    async def handshake(self, send_last: bool = True) -> None:
        while True:
            try:
                self.sslobj.do_handshake()
            except ssl.SSLWantReadError:
                await self.sock.send(self.outgoing.read())
                self.incoming.write(await self.sock.recv(65536))
                continue
            except ssl.SSLError:
                await self.sock.send(self.outgoing.read())  # the alert
                raise
            if send_last:
                await self.sock.send(self.outgoing.read())
            return


async def connect(
    server: socket.socket,
    client_sock: Any,
    server_ctx: ssl.SSLContext,
    client_ctx: ssl.SSLContext,
    *,
    transport_stream: trio.abc.Stream | None = None,
) -> tuple[TlsTransport, trio.SSLStream[trio.abc.Stream]]:
    """Both handshakes at once; the client checks the server's name (127.0.0.1)."""
    client = trio.SSLStream(
        transport_stream or trio.SocketStream(client_sock),
        client_ctx,
        server_hostname="127.0.0.1",
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.do_handshake)
        transport = await handshake(server.fileno(), server_ctx, TIMEOUT_S)
    return transport, client


async def failed_handshake(
    server: socket.socket,
    client_sock: Any,
    server_ctx: ssl.SSLContext,
    client_ctx: ssl.SSLContext,
) -> HandshakeFailed:
    """The server's HandshakeFailed; the client may see its handshake fail, or (TLS 1.3
    checks a client certificate after the client is done) its first read."""
    client = trio.SSLStream(trio.SocketStream(client_sock), client_ctx, server_hostname="127.0.0.1")

    async def client_side() -> None:
        try:
            await client.do_handshake()
            await client.receive_some(1)
        except trio.BrokenResourceError:
            await client.transport_stream.aclose()  # as a client gives up: it closes

    async with trio.open_nursery() as nursery:
        nursery.start_soon(client_side)
        with pytest.raises(HandshakeFailed) as failed:
            await handshake(server.fileno(), server_ctx, TIMEOUT_S)
        server.close()  # the connection would close now: the client's read ends
    assert "\n" not in failed.value.reason
    return failed.value


# -- a working connection ---------------------------------------------------------------------


@pytest.mark.parametrize("tls12", [False, True], ids=["TLSv1.3", "TLSv1.2"])
def test_echo_of_every_size_through_recv_and_send(pki: Pki, tls12: bool) -> None:
    sizes = [1, 100, 16384, 16385, 65536 + 7, SEND_CHUNK + 1, 1 << 20]
    client_ctx = client_context(pki.ca, None, None)
    if tls12:
        client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, client = await connect(server, client_sock, serving(pki), client_ctx)
            assert transport.version == ("TLSv1.2" if tls12 else "TLSv1.3")
            assert transport.principal == ANONYMOUS
            assert transport.peer_certificate is None

            async def echo() -> None:
                while data := await read_some(transport):
                    await write_all(transport, data)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(echo)
                for size in sizes:
                    payload = os.urandom(size)
                    async with trio.open_nursery() as inner:
                        inner.start_soon(client.send_all, payload)
                        assert await receive_exactly(client, size) == payload
                await client.aclose()  # close_notify: the echo reads b"" and ends

    run(main)


def test_pending_ciphertext_is_bounded_when_the_client_does_not_read(pki: Pki) -> None:
    block = bytes(range(256)) * 4096  # 1 MiB

    async def main() -> None:
        async with tcp_pair(sndbuf=65536) as (server, client_sock):
            transport, client = await connect(
                server, client_sock, serving(pki), client_context(pki.ca, None, None)
            )
            taken = 0
            with pytest.raises(BlockingIOError):  # sent until the socket is full
                for _ in range(256):
                    taken += transport.send(block)
                    assert transport.pending_bytes <= SEND_CHUNK + 4096
            assert transport.pending
            # A full socket takes nothing more: not a byte of plaintext is taken.
            pending = transport.pending_bytes
            with pytest.raises(BlockingIOError):
                transport.send(block)
            assert transport.pending_bytes == pending
            assert 0 < pending <= SEND_CHUNK + 4096  # records' overhead on one chunk
            assert not transport.flush()

            # The client reads: every byte taken arrives, whole and in order.
            total = taken + len(block)
            async with trio.open_nursery() as nursery:

                async def rest() -> None:
                    while not transport.flush():
                        await trio.lowlevel.wait_writable(transport.fd)
                    await write_all(transport, block)

                nursery.start_soon(rest)
                got = await receive_exactly(client, total)
            assert got == (block * (total // len(block) + 1))[:total]

    run(main)


def test_records_that_arrive_with_the_handshake_are_read_at_once(pki: Pki) -> None:
    """A TLS 1.3 client may send its request in the same segment as its Finished: it waits
    in the buffer, the socket has nothing more, and recv must give it rather than block."""

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            client = BioClient(client_sock, client_context(pki.ca, None, None))

            async def client_side() -> None:
                await client.handshake(send_last=False)
                client.sslobj.write(b"request after Finished")
                await client.sock.send(client.outgoing.read())  # Finished and the request

            async with trio.open_nursery() as nursery:
                nursery.start_soon(client_side)
                transport = await handshake(server.fileno(), serving(pki), TIMEOUT_S)
            assert transport.recv(65536) == b"request after Finished"
            with pytest.raises(BlockingIOError):
                transport.recv(65536)

    run(main)


class Gate(trio.abc.Stream):
    """The client's transport, which can stop part-way through a write: the server then
    holds a partial TLS record."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.hold: int | None = None  # bytes to let through before stopping
        self.release = trio.Event()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.hold is not None:
            await self.inner.send_all(data[: self.hold])
            await self.release.wait()
            data = data[self.hold :]
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self.inner.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_a_partial_record_is_waited_for_not_taken_for_the_end(pki: Pki) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            gate = Gate(trio.SocketStream(client_sock))
            transport, client = await connect(
                server,
                client_sock,
                serving(pki),
                client_context(pki.ca, None, None),
                transport_stream=gate,
            )
            gate.hold = 7  # the record's 5-byte header and 2 bytes of its body
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.send_all, b"hello, coordinator")
                await trio.lowlevel.wait_readable(transport.fd)
                await trio.sleep(0.05)  # the 7 bytes are all there is
                with pytest.raises(BlockingIOError):
                    transport.recv(65536)
                with pytest.raises(BlockingIOError):  # still nothing: not b""
                    transport.recv(65536)
                gate.release.set()
                assert await read_some(transport) == b"hello, coordinator"

    run(main)


@pytest.mark.parametrize("close_notify", [True, False], ids=["close_notify", "raw EOF"])
def test_the_clients_end_is_b_empty_after_what_it_sent(pki: Pki, close_notify: bool) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, client = await connect(
                server, client_sock, serving(pki), client_context(pki.ca, None, None)
            )
            await client.send_all(b"last words")
            if close_notify:
                await client.aclose()
            else:
                # The socket's end (a FIN) without close_notify. (Closing the socket would
                # send a reset: the client has not read the server's session tickets.)
                client_sock.shutdown(socket.SHUT_WR)
            got = bytearray()
            while data := await read_some(transport):
                got += data
            assert got == b"last words"
            assert transport.recv(65536) == b""  # and again, as os.read at the end

    run(main)


def test_the_servers_close_notify_ends_the_clients_stream(pki: Pki) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, client = await connect(
                server, client_sock, serving(pki), client_context(pki.ca, None, None)
            )
            await write_all(transport, b"goodbye")
            transport.close_notify()
            assert await receive_exactly(client, 7) == b"goodbye"
            assert await client.receive_some(100) == b""  # a clean end, not a broken one

    run(main)


def test_a_corrupted_record_is_a_connection_error(pki: Pki) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, client = await connect(
                server, client_sock, serving(pki), client_context(pki.ca, None, None)
            )
            # Application data that no key encrypted: its authentication fails.
            await client.transport_stream.send_all(b"\x17\x03\x03\x00\x20" + bytes(32))
            await trio.lowlevel.wait_readable(transport.fd)
            with pytest.raises(TlsFailure) as failed:
                transport.recv(65536)
            assert isinstance(failed.value, ConnectionError)  # "ended by the client"
            assert str(failed.value).startswith("TLS: ")

    run(main)


# -- mutual TLS and the principal -------------------------------------------------------------


@pytest.mark.parametrize("client_auth", ["requested", "required"])
def test_the_principal_is_the_client_certificates_subject(pki: Pki, client_auth: str) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, _ = await connect(server, client_sock, serving(pki, client_auth), alice(pki))
            assert transport.principal == "User:CN=alice,OU=eng,O=Example\\, Inc."
            assert transport.peer_certificate is not None

    run(main)


@pytest.mark.parametrize(
    ("client_auth", "with_cert"), [("requested", False), ("none", True), ("none", False)]
)
def test_without_a_client_certificate_the_principal_is_anonymous(
    pki: Pki, client_auth: str, with_cert: bool
) -> None:
    client_ctx = alice(pki) if with_cert else client_context(pki.ca, None, None)

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            transport, _ = await connect(server, client_sock, serving(pki, client_auth), client_ctx)
            assert transport.principal == ANONYMOUS
            assert transport.peer_certificate is None

    run(main)


@pytest.mark.parametrize("tls12", [False, True], ids=["TLSv1.3", "TLSv1.2"])
def test_required_client_auth_without_a_certificate_fails(pki: Pki, tls12: bool) -> None:
    client_ctx = client_context(pki.ca, None, None)
    if tls12:
        client_ctx.maximum_version = ssl.TLSVersion.TLSv1_2

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            failed = await failed_handshake(
                server, client_sock, serving(pki, "required"), client_ctx
            )
            assert failed.reason == "no client certificate (ssl.client.auth is required)"

    run(main)


def test_a_client_certificate_from_another_ca_fails_verification(pki: Pki) -> None:
    client_ctx = client_context(pki.ca, pki.stranger_cert, None)

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            failed = await failed_handshake(
                server, client_sock, serving(pki, "requested"), client_ctx
            )
            assert failed.reason.startswith("the client certificate failed verification: ")
            assert "issuer" in failed.reason  # ssl's own words: unable to get local issuer

    run(main)


def test_a_client_that_does_not_trust_the_server_says_so(pki: Pki) -> None:
    client_ctx = client_context(pki.stranger_ca, None, None)

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            client = BioClient(client_sock, client_ctx)

            async def client_side() -> None:
                with pytest.raises(ssl.SSLCertVerificationError):
                    await client.handshake()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(client_side)
                with pytest.raises(HandshakeFailed) as failed:
                    await handshake(server.fileno(), serving(pki), TIMEOUT_S)
            assert failed.value.reason == (
                "the client refused the server's certificate (alert: unknown ca)"
            )

    run(main)


# Each expected name is what Java 17's X500Principal.getName() gave for the same subject.
A = x509.NameAttribute
JAVA_NAMES = [
    (
        [
            A(NameOID.COUNTRY_NAME, "US"),
            A(NameOID.ORGANIZATION_NAME, "Example, Inc."),
            A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            A(NameOID.COMMON_NAME, "alice"),
        ],
        "CN=alice,OU=eng,O=Example\\, Inc.,C=US",
    ),
    (
        [
            A(NameOID.DOMAIN_COMPONENT, "com"),
            A(NameOID.DOMAIN_COMPONENT, "example"),
            A(NameOID.USER_ID, "u1"),
            A(NameOID.EMAIL_ADDRESS, "a@b.c"),
            A(NameOID.COMMON_NAME, ' lead#=+;<>"\\x '),
        ],
        'CN=\\ lead\\#\\=\\+\\;\\<\\>\\"\\\\x\\ ,1.2.840.113549.1.9.1=#16056140622e63,'
        "UID=u1,DC=example,DC=com",
    ),
    (
        [
            A(NameOID.SERIAL_NUMBER, "1234"),
            A(NameOID.STATE_OR_PROVINCE_NAME, "Zürich"),
            A(NameOID.LOCALITY_NAME, "#hash"),
            A(NameOID.STREET_ADDRESS, "1 Main St"),
            A(NameOID.COMMON_NAME, "bmp", _type=_ASN1Type.BMPString),
            A(NameOID.GIVEN_NAME, "Bob"),
            A(NameOID.TITLE, "t\r"),
        ],
        "2.5.4.12=#0c02740d,2.5.4.42=#0c03426f62,CN=\\00b\\00m\\00p,STREET=1 Main St,"
        "L=\\#hash,ST=Zürich,2.5.4.5=#130431323334",
    ),
]


@pytest.mark.parametrize(("attributes", "java"), JAVA_NAMES, ids=["plain", "escapes", "types"])
def test_names_are_written_as_java_writes_them(
    attributes: list[x509.NameAttribute[Any]], java: str
) -> None:
    assert rfc2253_name(x509.Name(attributes).public_bytes()) == java


def test_a_multi_valued_rdn_and_a_whole_certificate() -> None:
    name = x509.Name(
        [
            x509.RelativeDistinguishedName([A(NameOID.COMMON_NAME, "a"), A(NameOID.USER_ID, "b")]),
            x509.RelativeDistinguishedName([A(NameOID.ORGANIZATION_NAME, "o")]),
        ]
    )
    assert rfc2253_name(name.public_bytes()) == "O=o,CN=a+UID=b"  # as Java
    key = ec.generate_private_key(ec.SECP256R1())
    start = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    assert principal_of(cert.public_bytes(serialization.Encoding.DER)) == "User:O=o,CN=a+UID=b"
    assert principal_of(None) == "User:ANONYMOUS"


# -- handshakes that fail ---------------------------------------------------------------------


def kafka_api_versions_frame() -> bytes:
    # ApiVersions v3 with correlation id 1 and no client id, as a plaintext client opens.
    body = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00\x00\x00"
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize(
    ("first_bytes", "reason"),
    [
        (
            kafka_api_versions_frame(),
            "it speaks plaintext Kafka, not TLS (its first bytes are a Kafka request frame)",
        ),
        (b"GET / HTTP/1.1\r\n\r\n", "it does not speak TLS (first bytes: 47 45 54 20 2f 20 48 54)"),
    ],
    ids=["Kafka", "HTTP"],
)
def test_a_client_that_does_not_speak_tls(pki: Pki, first_bytes: bytes, reason: str) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            await client_sock.send(first_bytes)
            with pytest.raises(HandshakeFailed) as failed:
                await handshake(server.fileno(), serving(pki), TIMEOUT_S)
            assert failed.value.reason == reason

    run(main)


def test_bytes_already_read_are_the_handshakes_first(pki: Pki) -> None:
    frame = kafka_api_versions_frame()

    async def main() -> None:
        async with tcp_pair() as (server, _):
            with pytest.raises(HandshakeFailed, match="plaintext Kafka"):
                await handshake(server.fileno(), serving(pki), TIMEOUT_S, first=frame[:4])

    run(main)


def test_a_silent_client_times_out(pki: Pki) -> None:
    started = time.monotonic()

    async def main() -> None:
        async with tcp_pair() as (server, _):
            with pytest.raises(HandshakeFailed) as failed:
                await handshake(server.fileno(), serving(pki), TIMEOUT_S)
            assert failed.value.reason == "timed out after 10 s"

    run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert time.monotonic() - started < 5  # virtual time: the 10 s did not pass


def test_a_client_that_closes_during_the_handshake(pki: Pki) -> None:
    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            await client_sock.send(b"\x16\x03\x01\x00")  # a ClientHello's first bytes, then gone
            client_sock.close()
            with pytest.raises(HandshakeFailed) as failed:
                await handshake(server.fileno(), serving(pki), TIMEOUT_S)
            assert (
                failed.value.reason == "the client closed the connection during the TLS handshake"
            )

    run(main)


def test_tls_1_1_is_refused(pki: Pki) -> None:
    client_ctx = client_context(pki.ca, None, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # ssl frowns on TLS 1.1 too
        client_ctx.minimum_version = ssl.TLSVersion.TLSv1_1
        client_ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    client_ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # else OpenSSL 3 will not offer TLS 1.1

    async def main() -> None:
        async with tcp_pair() as (server, client_sock):
            failed = await failed_handshake(server, client_sock, serving(pki), client_ctx)
            assert failed.reason == (
                "the client offers only TLS versions older than 1.2 (unsupported protocol)"
            )

    run(main)


def test_looks_like_tls() -> None:
    assert looks_like_tls(b"\x16\x03\x01\x02\x00")
    assert looks_like_tls(b"\x16\x03\x03")
    assert not looks_like_tls(b"\x16\x03\x05\x00")
    assert not looks_like_tls(b"\x16\x03")  # too short to tell
    assert not looks_like_tls(kafka_api_versions_frame()[:4])
    assert not looks_like_tls(b"GET ")


# -- contexts ---------------------------------------------------------------------------------


def test_server_context_from_kafkas_settings(pki: Pki) -> None:
    ctx = server_context(pki.cert, pki.encrypted_key, "secret", None, "none")
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_NONE
    assert server_context(pki.chain, None, "", pki.ca, "requested").verify_mode == ssl.CERT_OPTIONAL
    assert server_context(pki.cert, pki.key, None, pki.ca, "required").verify_mode == (
        ssl.CERT_REQUIRED
    )
    # A password for a key that is not encrypted is not needed, and not refused.
    server_context(pki.chain, None, "unused", None, "none")


def test_client_context(pki: Pki) -> None:
    ctx = client_context(pki.ca, pki.client_cert, pki.client_key)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    ctx = client_context(pki.ca, None, None, check_hostname=False)
    assert not ctx.check_hostname
    assert ctx.verify_mode == ssl.CERT_REQUIRED  # the chain is still checked


REFUSALS = [
    ("missing keystore", "ssl.keystore.location: cannot read {d}/nope.pem: No such file"),
    ("keystore without a certificate", "ssl.keystore.location: {key} holds no PEM certificate"),
    ("keystore without a key", "ssl.keystore.location: {cert} holds no PEM private key"),
    ("garbled certificate", "ssl.keystore.location: cannot load the certificates in {d}/"),
    ("missing key", "ssl.key.location: cannot read {d}/nope.pem: No such file"),
    ("key of another certificate", "ssl.key.location: the private key in {stranger}"),
    ("garbled key", "ssl.key.location: cannot load the private key in {d}/garbled.pem"),
    ("no password", "ssl.key.password: the private key in {enc} is encrypted and no password"),
    ("wrong password", "ssl.key.password: does not decrypt the private key in {enc}"),
    (
        "requested without truststore",
        "ssl.client.auth is requested, which needs ssl.truststore",
    ),
    ("required without truststore", "ssl.client.auth is required, which needs ssl.truststore"),
    ("missing truststore", "ssl.truststore.location: cannot read {d}/nope.pem: No such file"),
    (
        "truststore without CAs",
        "ssl.truststore.location: cannot load CA certificates from {key}",
    ),
    (
        "unknown client auth",
        "ssl.client.auth: 'sometimes' is not one of none, requested, required",
    ),
]


@pytest.mark.parametrize(("case", "message"), REFUSALS, ids=[case for case, _ in REFUSALS])
def test_server_context_names_the_setting_at_fault(
    pki: Pki, tmp_path: Path, case: str, message: str
) -> None:
    d = str(tmp_path)
    nope = f"{d}/nope.pem"
    garbled = tmp_path / "garbled.pem"
    garbled.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    bad_chain = tmp_path / "bad-chain.pem"
    bad_chain.write_bytes(
        b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
        + Path(pki.key).read_bytes()
    )
    args = {
        "missing keystore": (nope, None, None, None, "none"),
        "keystore without a certificate": (pki.key, None, None, None, "none"),
        "keystore without a key": (pki.cert, None, None, None, "none"),
        "garbled certificate": (str(bad_chain), None, None, None, "none"),
        "missing key": (pki.cert, nope, None, None, "none"),
        "key of another certificate": (pki.cert, pki.stranger_cert, None, None, "none"),
        "garbled key": (pki.cert, str(garbled), None, None, "none"),
        "no password": (pki.cert, pki.encrypted_key, None, None, "none"),
        "wrong password": (pki.cert, pki.encrypted_key, "wrong", None, "none"),
        "requested without truststore": (pki.chain, None, None, None, "requested"),
        "required without truststore": (pki.chain, None, None, "", "required"),
        "missing truststore": (pki.chain, None, None, nope, "none"),
        "truststore without CAs": (pki.chain, None, None, pki.key, "none"),
        "unknown client auth": (pki.chain, None, None, pki.ca, "sometimes"),
    }[case]
    with pytest.raises(ValueError) as refused:
        server_context(*args)
    text = str(refused.value)
    expected = message.format(
        d=d, key=pki.key, cert=pki.cert, stranger=pki.stranger_cert, enc=pki.encrypted_key
    )
    assert text.startswith(expected), text
    assert "\n" not in text and "_ssl.c" not in text and "Traceback" not in text
