"""TLS for SSL and SASL_SSL listeners, shaped to the connection's raw descriptor.

The connection reads and writes straight on the socket's non-blocking descriptor and waits
through Trio only when the socket would block; a stream wrapper (trio.SSLStream) would give
back the scheduler passes that saves. So TLS here is OpenSSL over memory buffers
(ssl.SSLObject with two MemoryBIOs), and TlsTransport's recv and send behave as os.read and
os.write do on the descriptor: bytes or BlockingIOError, b"" only at the client's end. It
must never keep plaintext inside itself while its caller waits for the socket (a request
would wait for ever), never take a partial record for the end of the connection, and never
hold more than about one chunk of ciphertext that the socket has not taken.

Also here: the server and client contexts from Kafka's settings (ssl.keystore.location,
ssl.key.location, ssl.key.password, ssl.truststore.location, ssl.client.auth), refused at
start with the setting's name; the handshake, under a deadline, with one exception type and
a one-line reason; and the principal of a client certificate, as Kafka names it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import ssl

import trio

READ_CHUNK = 65536  # raw bytes read from the socket at a time, as the connection reads
SEND_CHUNK = 256 * 1024  # plaintext encrypted per send: the most ciphertext ever pending
ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class HandshakeFailed(Exception):
    """The TLS handshake did not complete; `reason` is one line for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TlsFailure(ConnectionError):
    """The client's TLS records could not be read (bad MAC, an alert, a protocol
    violation). A ConnectionError, so that the connection ends as when a client resets it."""


# -- contexts -------------------------------------------------------------------------------


class _NoPassword(Exception):
    """OpenSSL asked for the key's password and none is configured."""


_PRIVATE_KEY = re.compile(rb"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----")
_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


def server_context(
    keystore: str,
    key: str | None,
    key_password: str | None,
    truststore: str | None,
    client_auth: str,
) -> ssl.SSLContext:
    """The context of a TLS listener, from Kafka's settings (PEM files only).

    `keystore` is the certificate chain, server certificate first, and may hold the private
    key too; `key` is the key's own file, if apart. A file that cannot be used raises
    ValueError naming the setting and the cause, in one line."""
    if client_auth not in CLIENT_AUTH:
        raise ValueError(f"ssl.client.auth: {client_auth!r} is not one of {', '.join(CLIENT_AUTH)}")
    if client_auth != "none" and not truststore:
        raise ValueError(
            f"ssl.client.auth is {client_auth}, which needs ssl.truststore.location "
            "(the CA certificates that client certificates are checked against)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A renegotiation started by the client costs the server a handshake each time, and
    # Kafka's clients never start one: refused.
    context.options |= ssl.OP_NO_RENEGOTIATION
    _load_chain(context, keystore, key or None, key_password or None)
    if truststore:
        _load_trust(context, truststore, "ssl.truststore.location")
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_context(
    cafile: str | None, certfile: str | None, keyfile: str | None, check_hostname: bool = True
) -> ssl.SSLContext:
    """A client's context, for fastcoord's own load generator: `cafile` (else the system's
    CAs) to trust the server, `certfile`/`keyfile` for mutual TLS. Errors are ssl's own."""
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname  # the chain is still verified without it
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    return context


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None


def _load_chain(
    context: ssl.SSLContext, keystore: str, key: str | None, password: str | None
) -> None:
    # ssl says only "PEM lib" for most failures, so the files are looked at first to name
    # the setting at fault.
    chain = _read(keystore, "ssl.keystore.location")
    key_setting, key_path = (
        ("ssl.key.location", key) if key else ("ssl.keystore.location", keystore)
    )
    key_pem = _read(key, key_setting) if key else chain
    if _CERTIFICATE not in chain:
        raise ValueError(f"ssl.keystore.location: {keystore} holds no PEM certificate")
    if not _PRIVATE_KEY.search(key_pem):
        hint = "" if key else " (set ssl.key.location, or append the key to the keystore)"
        raise ValueError(f"{key_setting}: {key_path} holds no PEM private key{hint}")

    def ask() -> bytes:
        # Without this, OpenSSL would prompt on the terminal for an encrypted key's password.
        if password is None:
            raise _NoPassword
        return password.encode("utf-8")

    try:
        context.load_cert_chain(keystore, key, password=ask)
    except _NoPassword:
        raise ValueError(
            f"ssl.key.password: the private key in {key_path} is encrypted and no password is set"
        ) from None
    except OSError as exc:  # ssl.SSLError too: a file replaced since it was read
        if getattr(exc, "reason", None) == "KEY_VALUES_MISMATCH":
            raise ValueError(
                f"{key_setting}: the private key in {key_path} does not match the certificate "
                f"in {keystore}"
            ) from None
        broken = _unreadable_certificates(chain)
        if broken is not None:
            raise ValueError(
                f"ssl.keystore.location: cannot load the certificates in {keystore}: {broken}"
            ) from None
        if b"ENCRYPTED" in key_pem and password is not None:
            raise ValueError(
                f"ssl.key.password: does not decrypt the private key in {key_path}"
            ) from None
        raise ValueError(
            f"{key_setting}: cannot load the private key in {key_path}: {_ssl_reason(exc)}"
        ) from None


def _unreadable_certificates(pem: bytes) -> str | None:
    """Why OpenSSL cannot read the certificates of a PEM file, or None if it can (the key
    blocks beside them are skipped)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=pem.decode("ascii", errors="replace")
        )
    except (OSError, ValueError) as exc:
        return _ssl_reason(exc)
    return None


def _load_trust(context: ssl.SSLContext, path: str, setting: str) -> None:
    _read(path, setting)  # a missing file named as such, not as an ssl error
    try:
        context.load_verify_locations(cafile=path)
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"{setting}: cannot load CA certificates from {path}: {_ssl_reason(exc)}"
        ) from None


def _ssl_reason(exc: BaseException) -> str:
    """ssl's reason in words ("key values mismatch"), without the _ssl.c line."""
    reason = getattr(exc, "reason", None)
    if reason:
        return str(reason).lower().replace("_", " ")
    text = getattr(exc, "strerror", None) or str(exc)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(text)).splitlines()[0] if text else "error"


# -- the principal --------------------------------------------------------------------------

# Java's X500Principal.getName() (RFC 2253) writes these attribute types by keyword and any
# other by dotted OID with the DER value in hex (sun.security.x509.AVA.toRFC2253String).
_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# The DER string types Java writes as text: Printable, T61, IA5, General, BMP, UTF8.
_STRING_TAGS = frozenset({0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C})
_ESCAPED = frozenset(',=+<>#;"\\')


def principal_of(cert: bytes | None) -> str:
    """Kafka's default principal of a TLS client: "User:" and the subject's distinguished
    name as Java's X500Principal.getName() writes it (RFC 2253, most specific first:
    "User:CN=client,OU=eng,O=org"), or User:ANONYMOUS without a client certificate.

    `cert` is the DER certificate (SSLObject.getpeercert(binary_form=True)): the dict form
    drops the ASN.1 type of each value, which Java's form of other attributes shows. A
    certificate that is not DER raises ValueError."""
    if cert is None:
        return ANONYMOUS
    # Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
    #   serialNumber, signature, issuer, validity, subject, ... }, ... }  (RFC 5280 4.1)
    tag, certificate, _ = _tlv(cert, 0)
    _expect(tag, 0x30, "Certificate")
    tag, tbs, _ = _tlv(certificate, 0)
    _expect(tag, 0x30, "TBSCertificate")
    pos = 0
    if tbs[:1] == b"\xa0":
        _, _, pos = _tlv(tbs, pos)  # the version
    for _field in ("serialNumber", "signature", "issuer", "validity"):
        _, _, pos = _tlv(tbs, pos)
    _, _, end = _tlv(tbs, pos)
    return "User:" + rfc2253_name(tbs[pos:end])


def rfc2253_name(name_der: bytes) -> str:
    """An X.501 Name (DER) as Java's X500Principal.getName() writes it."""
    tag, rdns, _ = _tlv(name_der, 0)
    _expect(tag, 0x30, "Name")
    names: list[str] = []
    pos = 0
    while pos < len(rdns):
        tag, rdn, pos = _tlv(rdns, pos)
        _expect(tag, 0x31, "RelativeDistinguishedName")
        avas: list[str] = []
        at = 0
        while at < len(rdn):
            tag, ava, at = _tlv(rdn, at)
            _expect(tag, 0x30, "AttributeTypeAndValue")
            tag, oid, value_at = _tlv(ava, 0)
            _expect(tag, 0x06, "AttributeType")
            value_tag, value, _ = _tlv(ava, value_at)
            avas.append(_ava(_dotted(oid), value_tag, value, ava[value_at:]))
        names.append("+".join(avas))
    return ",".join(reversed(names))  # Java writes the most specific RDN first


def _ava(oid: str, tag: int, value: bytes, der: bytes) -> str:
    keyword = _RFC2253_KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{der.hex()}"
    text = value.decode("utf-8", errors="replace")  # as Java: UTF-8 whatever the string type
    escaped: list[str] = []
    for char in text:
        if char in _ESCAPED:
            escaped.append("\\" + char)
        elif char == "\0":
            escaped.append("\\00")
        else:
            escaped.append(char)
    chars = list("".join(escaped))
    # Then leading and trailing spaces (and carriage returns) are escaped, as Java does.
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return (
        keyword
        + "="
        + "".join("\\" + char if i < lead or i > trail else char for i, char in enumerate(chars))
    )


def _tlv(data: bytes, pos: int) -> tuple[int, bytes, int]:
    """One DER element at pos: (tag, contents, position after it)."""
    try:
        tag = data[pos]
        length = data[pos + 1]
        pos += 2
        if length & 0x80:
            count = length & 0x7F
            length = int.from_bytes(data[pos : pos + count], "big")
            pos += count
    except IndexError:
        raise ValueError("truncated DER in the certificate") from None
    if pos + length > len(data):
        raise ValueError("truncated DER in the certificate")
    return tag, data[pos : pos + length], pos + length


def _expect(tag: int, wanted: int, what: str) -> None:
    if tag != wanted:
        raise ValueError(f"malformed certificate: {what} has tag {tag:#x}")


def _dotted(oid: bytes) -> str:
    numbers: list[int] = []
    value = 0
    for byte in oid:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            numbers.append(value)
            value = 0
    if not numbers:
        raise ValueError("malformed certificate: an empty OID")
    first = numbers[0]
    head = [0, first] if first < 40 else [1, first - 40] if first < 80 else [2, first - 80]
    return ".".join(str(n) for n in head + numbers[1:])


# -- the transport --------------------------------------------------------------------------


class TlsTransport:
    """A TLS connection over a non-blocking socket descriptor, with os.read and os.write's
    shape: recv gives plaintext, send takes it; both raise BlockingIOError when the socket
    would block, and the caller waits with trio.lowlevel.wait_readable / wait_writable.

    Ciphertext the socket did not take is kept (`pending`) and written first by the next
    send or flush: a caller that has nothing more to send must flush until `pending` is
    False, waiting for the socket to be writable, or the tail of its last answer stays here.
    """

    __slots__ = ("_eof", "_in", "_out", "_outgoing", "_ssl", "fd", "peer_certificate", "principal")

    def __init__(
        self, fd: int, sslobj: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO
    ) -> None:
        """Made by handshake(), once the handshake is done."""
        self.fd = fd
        self._ssl = sslobj
        self._in = incoming
        self._outgoing = outgoing
        self._out = bytearray()  # ciphertext the socket has not taken yet
        self._eof = False  # the client's end was seen: recv gives b"" from now on
        self.peer_certificate: bytes | None = sslobj.getpeercert(binary_form=True)
        self.principal = principal_of(self.peer_certificate)

    @property
    def version(self) -> str | None:
        """The protocol version agreed, "TLSv1.3" say, for a log line."""
        return self._ssl.version()

    @property
    def pending(self) -> bool:
        """Ciphertext waits for the socket to take it."""
        return bool(self._out)

    @property
    def pending_bytes(self) -> int:
        return len(self._out)

    def recv(self, n: int = READ_CHUNK) -> bytes:
        """The plaintext that has arrived, as os.read gives bytes: b"" only at the client's
        end (the socket's end, or TLS close_notify), BlockingIOError when none has arrived
        and the socket has nothing more (a partial record is waited for, not taken for the
        end).

        `n` is taken for os.read's shape but does not bound the answer: every byte of
        plaintext OpenSSL can decrypt is returned, so that none waits inside it while the
        caller waits for the socket. One raw read of at most READ_CHUNK is decrypted per
        call (with what was left of a partial record: at most READ_CHUNK and a record, 16
        KiB). A TLS error raises TlsFailure, a ConnectionError."""
        del n  # see above
        if self._eof:
            return b""
        try:
            # Records that came with the handshake's last bytes wait in the buffer, and the
            # socket may have nothing more: they are read first.
            plain = self._decrypt()
            while not plain and not self._eof:
                data = os.read(self.fd, READ_CHUNK)  # BlockingIOError goes to the caller
                if not data:
                    # The socket's end, with or without close_notify; a partial record left
                    # in the buffer is dropped, as Kafka drops a partial frame.
                    self._eof = True
                    break
                self._in.write(data)
                plain = self._decrypt()
            return plain
        finally:
            # Reading may have made TLS answer (a TLS 1.3 KeyUpdate): sent if the socket
            # takes it now, else kept pending for the next send or flush.
            if self._outgoing.pending:
                self._out += self._outgoing.read()
            if self._out:
                with contextlib.suppress(OSError):  # the next send or recv meets it
                    self._write_out()

    def send(self, data: bytes | bytearray | memoryview) -> int:
        """Encrypt and write up to SEND_CHUNK bytes of `data`, as os.write: the number of
        plaintext bytes taken, which are then the transport's to deliver; BlockingIOError
        when ciphertext from before is still pending (nothing of `data` is taken then).
        The ciphertext the socket does not take now is pending: at most one chunk's."""
        if self._out:
            self._write_out()
            if self._out:
                raise BlockingIOError(errno.EAGAIN, "TLS ciphertext is waiting for the socket")
        if not data:
            return 0
        chunk = data if len(data) <= SEND_CHUNK else data[:SEND_CHUNK]
        try:
            taken = self._ssl.write(chunk)
        except ssl.SSLError as exc:
            raise TlsFailure(f"TLS: {_ssl_reason(exc)}") from None
        self._out += self._outgoing.read()
        self._write_out()
        return taken

    def flush(self) -> bool:
        """Write pending ciphertext, as much as the socket takes; True when none is left.
        Errors other than a full socket (a reset) go to the caller."""
        if self._out:
            self._write_out()
        return not self._out

    def close_notify(self) -> None:
        """Say goodbye in TLS (close_notify), best effort, before the socket is closed:
        Kafka's clients do not need it, but it tells a client's TLS that nothing was cut."""
        # SSLWantReadError until the client's own close_notify is read: ours is out anyway.
        with contextlib.suppress(ssl.SSLError):
            self._ssl.unwrap()
        self._out += self._outgoing.read()
        with contextlib.suppress(OSError):
            self._write_out()

    def _decrypt(self) -> bytes:
        """All the plaintext the bytes received so far make."""
        parts: list[bytes] = []
        sslobj = self._ssl
        incoming = self._in
        read = sslobj.read
        # OpenSSL takes one record per read and takes it from the buffer exactly (no read
        # ahead), so with the buffer empty and no plaintext left over there is nothing to
        # read: the check saves the SSLWantReadError that would say so, a microsecond a call.
        while incoming.pending or sslobj.pending():
            try:
                part = read(READ_CHUNK)
            except ssl.SSLWantReadError:
                break  # a partial record, or nothing: wait for more bytes
            except ssl.SSLZeroReturnError:
                self._eof = True  # close_notify: the client has said all it will
                break
            except ssl.SSLError as exc:
                raise TlsFailure(f"TLS: {_ssl_reason(exc)}") from None
            if not part:
                self._eof = True
                break
            parts.append(part)
        return b"".join(parts)

    def _write_out(self) -> None:
        out = self._out
        while out:
            try:
                sent = os.write(self.fd, out)
            except BlockingIOError:
                return
            del out[:sent]


# -- the handshake --------------------------------------------------------------------------


def looks_like_tls(prefix: bytes) -> bool:
    """The first bytes are a TLS handshake record (a ClientHello): content type 0x16, then
    the record version 3.0 to 3.4. At least three bytes are needed; fewer is False."""
    return len(prefix) >= 3 and prefix[0] == 0x16 and prefix[1] == 0x03 and prefix[2] <= 0x04


def _not_tls(prefix: bytes) -> str | None:
    """Why the client's first bytes cannot start a TLS handshake, or None if they can."""
    if prefix[0] == 0x16:
        return None
    if prefix[0] == 0x00:
        # A Kafka frame opens with its 4-byte big-endian size, which is under 16 MiB.
        return "it speaks plaintext Kafka, not TLS (its first bytes are a Kafka request frame)"
    return f"it does not speak TLS (first bytes: {prefix[:8].hex(' ')})"


_ALERT = re.compile(r"^(?:TLSV1|SSLV3|TLSV13)_ALERT_(.+)$")
_CERT_ALERTS = ("bad certificate", "unknown ca", "certificate unknown", "decrypt error")


def _handshake_reason(exc: ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the client certificate failed verification: {exc.verify_message}"
    reason = exc.reason or ""
    if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        return "no client certificate (ssl.client.auth is required)"
    if reason in ("UNSUPPORTED_PROTOCOL", "WRONG_SSL_VERSION", "TLSV1_ALERT_PROTOCOL_VERSION"):
        return "the client offers only TLS versions older than 1.2 (unsupported protocol)"
    if reason == "NO_SHARED_CIPHER":
        return "no cipher suite in common with the client"
    alert = _ALERT.match(reason)
    if alert:
        words = alert.group(1).lower().replace("_", " ")
        if words in _CERT_ALERTS:
            return f"the client refused the server's certificate (alert: {words})"
        return f"the client sent the TLS alert: {words}"
    return f"TLS handshake failed: {_ssl_reason(exc)}"


async def handshake(
    fd: int, context: ssl.SSLContext, timeout_s: float, first: bytes = b""
) -> TlsTransport:
    """The server's side of the handshake over the non-blocking descriptor fd, within
    timeout_s; `first` is what was already read from the socket, if anything. Any failure
    raises HandshakeFailed with a one-line reason; the TLS alert saying why is sent to the
    client first, if the socket takes it at once."""
    incoming = ssl.MemoryBIO()
    outgoing = ssl.MemoryBIO()
    sslobj = context.wrap_bio(incoming, outgoing, server_side=True)
    try:
        with trio.fail_after(timeout_s):
            await _drive(fd, sslobj, incoming, outgoing, first)
    except trio.TooSlowError:
        raise HandshakeFailed(f"timed out after {timeout_s:g} s") from None
    except OSError as exc:  # the socket itself failed: a reset, a broken pipe
        raise HandshakeFailed(f"the connection failed: {exc.strerror or exc}") from None
    try:
        return TlsTransport(fd, sslobj, incoming, outgoing)
    except ValueError as exc:  # OpenSSL verified it, so hardly: but one exception type
        raise HandshakeFailed(f"the client certificate cannot be read: {exc}") from None


async def _drive(
    fd: int, sslobj: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO, data: bytes
) -> None:
    checked = False  # the first bytes were looked at
    out = bytearray()
    while True:
        if data:
            if not checked:
                reason = _not_tls(data)
                if reason is not None:
                    raise HandshakeFailed(reason)
                checked = True
            incoming.write(data)
        try:
            sslobj.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError as exc:
            _send_quietly(fd, outgoing.read())
            raise HandshakeFailed(_handshake_reason(exc)) from None
        out += outgoing.read()
        # All of it is written before the handshake is done: the client waits for it,
        # TLS 1.3 session tickets included.
        await _write_all(fd, out)
        if done:
            return
        data = await _read_some(fd)
        if not data:
            raise HandshakeFailed("the client closed the connection during the TLS handshake")


async def _write_all(fd: int, out: bytearray) -> None:
    while out:
        try:
            sent = os.write(fd, out)
        except BlockingIOError:
            await trio.lowlevel.wait_writable(fd)
            continue
        del out[:sent]


async def _read_some(fd: int) -> bytes:
    while True:
        try:
            return os.read(fd, READ_CHUNK)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


def _send_quietly(fd: int, data: bytes) -> None:
    """The alert that tells the client why, if the socket takes it now: it is not waited
    for, since the connection is closed next."""
    if data:
        with contextlib.suppress(OSError):
            os.write(fd, data)
