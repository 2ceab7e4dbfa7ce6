"""Users and ACLs as the configuration writes them: `[[user]]` and `[[acl]]` tables.

A user's password may be given in the file for convenience; the configuration converts it
at load into what the server keeps (SCRAM's salt, iterations, stored key and server key, and
a salted digest for PLAIN), so the password itself is never held past loading.
"""

from __future__ import annotations

import msgspec

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


class ScramCredential(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Kafka's stored SCRAM credential (base64 fields, as `kafka-configs` shows them)."""

    salt: str
    iterations: int
    stored_key: str
    server_key: str


class PlainCredential(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A salted SHA-256 of a PLAIN password (base64 fields): enough to check one, cheaply."""

    salt: str
    digest: str


class User(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """A user as written. `password` is converted at load (see security/credentials.py);
    what is kept are the credentials, one per mechanism the user may log in with."""

    name: str
    password: str | None = None
    iterations: int = 4096  # SCRAM's, when converting a password (Kafka's default)
    mechanisms: list[str] = msgspec.field(default_factory=lambda: list(MECHANISMS))
    plain: PlainCredential | None = None
    scram_sha_256: ScramCredential | None = None
    scram_sha_512: ScramCredential | None = None


class AclEntry(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, omit_defaults=True
):
    """One ACL binding as written (Kafka's AclBinding): who may do what to which resource."""

    principal: str  # User:NAME, or User:* for everyone
    resource_type: str  # Topic, Group, Cluster (any case)
    resource_name: str  # a name, "*" for every one, or a prefix when pattern_type is PREFIXED
    operation: str  # Read, Write, Describe, Delete, Alter, All, ... (any case)
    permission: str = "ALLOW"  # ALLOW or DENY
    pattern_type: str = "LITERAL"  # LITERAL or PREFIXED
    host: str = "*"
