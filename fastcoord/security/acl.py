"""Kafka's ACL model and its authorizer: who may do what to which resource.

An ACL binding says that a principal (`User:alice`, or `User:*` for everyone) from a host
(`*` for any) is ALLOWed or DENYed an operation on a resource pattern: a resource type and
a name, taken literally (`*` standing for every name) or as a prefix. The codes are Kafka's
(clients/src/main/java/org/apache/kafka/common/resource/{ResourceType,PatternType}.java and
common/acl/{AclOperation,AclPermissionType}.java), as the DescribeAcls, CreateAcls and
DeleteAcls messages carry them.

`Authorizer.authorize` decides as Kafka's StandardAuthorizer and AclAuthorizer do: a super
user may do everything; otherwise the ACLs whose pattern matches the resource are looked
at, and one DENY among those that match the principal, host and operation wins over any
ALLOW; ALL matches every operation; an ALLOW of READ, WRITE, DELETE or ALTER also allows
DESCRIBE, and one of ALTER_CONFIGS allows DESCRIBE_CONFIGS (a DENY implies nothing); with
no ACL at all on the resource, `allow.everyone.if.no.acl.found` decides. The ACLs are
indexed by resource (literal names, the wildcard, prefixes by length), so a check costs
the ACLs that match, not all of them.

`AclBindingFilter` is Kafka's filter for DescribeAcls and DeleteAcls: ANY (or a null
field) matches anything, and a MATCH pattern matches every pattern that would apply to the
named resource. Sans-IO and free of the server: the core and the server both use it.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TypeVar

import msgspec

from fastcoord.security.entries import AclEntry

WILDCARD = "*"  # a literal resource name or host that matches every one
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
_E = TypeVar("_E", bound=enum.IntEnum)


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type, the name compared as it is
    MATCH = 2  # filters only: every pattern that applies to the named resource
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15  # Kafka 4.1 (KIP-939)


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# What an ALLOW of an operation also allows (AuthorizerData.IMPLIES_DESCRIBE and
# IMPLIES_DESCRIBE_CONFIGS): the operation asked -> the ACL operations that allow it.
_IMPLIED_BY: dict[int, frozenset[int]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


class AclBinding(msgspec.Struct, frozen=True, gc=False):
    """One ACL: a resource pattern and an access control entry (Kafka's AclBinding).
    Frozen, so hashable: the authorizer keeps sets of them."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def invalid(self) -> str | None:
        """Why Kafka refuses to create this binding (AclControlManager.validateNewAcl and
        the broker's check of the cluster's name), or None."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return f"Invalid resourceType {self.resource_type.name}"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid patternType {self.pattern_type.name}"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Invalid operation {self.operation.name}"
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"Invalid permissionType {self.permission.name}"
        if not self.resource_name:
            return "Resource name should not be empty"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if ":" not in self.principal:
            return (
                f"Could not parse principal from `{self.principal}` (no colon is present "
                "separating the principal type from the principal name)"
            )
        return None


class AclBindingFilter(msgspec.Struct, frozen=True, gc=False):
    """Kafka's AclBindingFilter: which bindings a DescribeAcls or DeleteAcls names. A None
    name, principal or host, and ANY codes, match anything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def unknown(self) -> str | None:
        """The field Kafka cannot read (an UNKNOWN code), as a message, or None."""
        for name in ("resource_type", "pattern_type", "operation", "permission"):
            if getattr(self, name) == 0:
                return f"Filter has an UNKNOWN {name.replace('_', ' ')}"
        return None

    def matches(self, binding: AclBinding) -> bool:
        """ResourcePatternFilter.matches and AccessControlEntryFilter.matches together."""
        rtype, ptype, name = self.resource_type, self.pattern_type, self.resource_name
        if rtype != ResourceType.ANY and rtype != binding.resource_type:
            return False
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != binding.pattern_type:
            return False
        if name is not None:
            if ptype == PatternType.ANY or ptype == binding.pattern_type:
                if name != binding.resource_name:
                    return False
            elif binding.pattern_type == PatternType.LITERAL:  # ptype is MATCH
                if name != binding.resource_name and binding.resource_name != WILDCARD:
                    return False
            elif not name.startswith(binding.resource_name):  # MATCH of a PREFIXED pattern
                return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return self.permission == AclPermissionType.ANY or self.permission == binding.permission


# The first code of each type that a binding may hold: below it are UNKNOWN and the
# filters' ANY (and MATCH, for pattern types).
_FIRST_CONCRETE: dict[type[enum.IntEnum], int] = {
    ResourceType: ResourceType.TOPIC,
    PatternType: PatternType.LITERAL,
    AclOperation: AclOperation.ALL,
    AclPermissionType: AclPermissionType.DENY,
}


def _code(enum_type: type[enum.IntEnum], field: str, text: str) -> int:
    # Kafka's fromString takes the constant's name in any case ("Read", "READ"); kafka-acls
    # also writes CamelCase ("DescribeConfigs"), so underscores and dashes are ignored.
    wanted = text.strip().replace("_", "").replace("-", "").upper()
    usable = [m for m in enum_type if m.value >= _FIRST_CONCRETE[enum_type]]
    for member in usable:
        if member.name.replace("_", "") == wanted:
            return member.value
    names = ", ".join(m.name for m in usable)
    raise ValueError(f"{field} {text!r} is not one of {names}")


def binding_from_entry(entry: AclEntry) -> AclBinding:
    """The binding an `[[acl]]` entry of the configuration writes; ValueError naming the
    field when one cannot be read, or when Kafka would refuse the binding."""
    binding = AclBinding(
        ResourceType(_code(ResourceType, "resource type", entry.resource_type)),
        entry.resource_name,
        PatternType(_code(PatternType, "pattern type", entry.pattern_type)),
        entry.principal,
        entry.host,
        AclOperation(_code(AclOperation, "operation", entry.operation)),
        AclPermissionType(_code(AclPermissionType, "permission", entry.permission)),
    )
    why = binding.invalid()
    if why is not None:
        raise ValueError(why)
    return binding


# The operations each resource type has (AclEntry.supportedOperations): what an
# authorized-operations answer lists.
SUPPORTED_OPERATIONS: dict[int, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
}


class Authorizer:
    """The ACLs in force, and the decision for one action.

    Index: `_literal[(type, name)]` holds the LITERAL bindings of a name (the wildcard's
    under "*"); `_prefixed[(type, prefix)]` the PREFIXED ones, and `_prefix_lengths[type]`
    counts the prefixes by length, so that a name is looked up once per length in use."""

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        bindings: Iterable[AclBinding] = (),
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._bindings: set[AclBinding] = set()
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[int, Counter[int]] = {}
        self.add(bindings)

    def __len__(self) -> int:
        return len(self._bindings)

    def __contains__(self, binding: object) -> bool:
        return binding in self._bindings

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._bindings)

    # -- changes ------------------------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Put bindings in force; those already in force are left as they are. Returns the
        ones that were not."""
        added = []
        for binding in bindings:
            if binding in self._bindings:
                continue
            self._bindings.add(binding)
            key = (binding.resource_type, binding.resource_name)
            if binding.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(binding)
                lengths = self._prefix_lengths.setdefault(binding.resource_type, Counter())
                lengths[len(binding.resource_name)] += 1
            else:
                self._literal.setdefault(key, []).append(binding)
            added.append(binding)
        return added

    def discard(self, binding: AclBinding) -> bool:
        """Take one binding out of force; False if it was not in force."""
        if binding not in self._bindings:
            return False
        self._bindings.remove(binding)
        key = (binding.resource_type, binding.resource_name)
        index = self._prefixed if binding.pattern_type == PatternType.PREFIXED else self._literal
        entries = index[key]
        entries.remove(binding)
        if not entries:
            del index[key]
        if binding.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[binding.resource_type]
            lengths[len(binding.resource_name)] -= 1
            if not lengths[len(binding.resource_name)]:
                del lengths[len(binding.resource_name)]
        return True

    def remove(self, filters: Iterable[AclBindingFilter]) -> list[AclBinding]:
        """Take out of force every binding any filter matches; returns them, each once."""
        removed = {b: None for f in filters for b in self.describe(f)}
        for binding in removed:
            self.discard(binding)
        return list(removed)

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings in force that the filter matches, in a stable order."""
        return sorted((b for b in self._bindings if acl_filter.matches(b)), key=_order)

    # -- decisions ----------------------------------------------------------------------

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Whether `principal`, connected from `host`, may do `operation` on the resource."""
        if principal in self.super_users:
            return True
        found = allowed = False
        for bindings in self._matching(resource_type, name):
            found = True
            for acl in bindings:
                if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                    continue
                if acl.host != host and acl.host != WILDCARD:
                    continue
                deny = acl.permission == AclPermissionType.DENY
                op = acl.operation
                if op != AclOperation.ALL and op != operation:
                    implied_by = _IMPLIED_BY.get(operation)
                    if deny or implied_by is None or op not in implied_by:
                        continue
                if deny:
                    return False
                allowed = True
        return allowed or (not found and self.allow_everyone_if_no_acl_found)

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The operations the resource type has that the principal may do on it, as the
        bit field (bit = operation code) of Kafka's authorized-operations answers."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    def _matching(self, resource_type: int, name: str) -> Iterator[list[AclBinding]]:
        """The lists of bindings whose pattern applies to the resource: its literal name,
        the wildcard, and each prefix of the name in use."""
        literal = self._literal
        exact = literal.get((resource_type, name))
        if exact:
            yield exact
        if name != WILDCARD:
            wildcard = literal.get((resource_type, WILDCARD))
            if wildcard:
                yield wildcard
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length <= len(name):
                    found = prefixed.get((resource_type, name[:length]))
                    if found:
                        yield found


def _order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission,
    )


def _known(enum_type: type[_E], code: int) -> _E:
    # Kafka's fromCode: a code it does not know is UNKNOWN, which validation then refuses.
    try:
        return enum_type(code)
    except ValueError:
        return enum_type(0)


def binding_of(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding:
    """A binding from the codes a CreateAcls request carries (unknown codes are UNKNOWN)."""
    return AclBinding(
        _known(ResourceType, resource_type),
        resource_name,
        _known(PatternType, pattern_type),
        principal,
        host,
        _known(AclOperation, operation),
        _known(AclPermissionType, permission),
    )


def filter_of(
    resource_type: int,
    resource_name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclBindingFilter:
    """A filter from the codes a DescribeAcls or DeleteAcls request carries."""
    return AclBindingFilter(
        _known(ResourceType, resource_type),
        resource_name,
        _known(PatternType, pattern_type),
        principal,
        host,
        _known(AclOperation, operation),
        _known(AclPermissionType, permission),
    )
