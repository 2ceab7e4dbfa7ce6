"""The ACL model and the authorizer: Kafka's decisions, its filters, and the index checked
against a plain walk over every binding."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastcoord.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    binding_from_entry,
    binding_of,
    filter_of,
)
from fastcoord.security.entries import AclEntry

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
HOST = "10.0.0.1"


def acl(
    name: str,
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    principal: str = "User:alice",
    resource_type: ResourceType = TOPIC,
    pattern: PatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def can(
    authorizer: Authorizer,
    name: str,
    operation: AclOperation = Op.READ,
    principal: str = "User:alice",
    resource_type: ResourceType = TOPIC,
    host: str = HOST,
) -> bool:
    return authorizer.authorize(principal, host, operation, resource_type, name)


# -- decisions ----------------------------------------------------------------------------


def test_the_codes_are_kafkas() -> None:
    assert [(t.name, t.value) for t in ResourceType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("TOPIC", 2),
        ("GROUP", 3),
        ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5),
        ("DELEGATION_TOKEN", 6),
        ("USER", 7),
    ]
    assert [(p.name, p.value) for p in PatternType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("MATCH", 2),
        ("LITERAL", 3),
        ("PREFIXED", 4),
    ]
    assert [(o.name, o.value) for o in Op][:15] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("ALL", 2),
        ("READ", 3),
        ("WRITE", 4),
        ("CREATE", 5),
        ("DELETE", 6),
        ("ALTER", 7),
        ("DESCRIBE", 8),
        ("CLUSTER_ACTION", 9),
        ("DESCRIBE_CONFIGS", 10),
        ("ALTER_CONFIGS", 11),
        ("IDEMPOTENT_WRITE", 12),
        ("CREATE_TOKENS", 13),
        ("DESCRIBE_TOKENS", 14),
    ]
    assert (AclPermissionType.ANY, DENY, ALLOW) == (1, 2, 3)


def test_an_allow_allows_only_its_principal_operation_and_resource() -> None:
    a = Authorizer(bindings=[acl("orders")])
    assert can(a, "orders")
    assert not can(a, "orders", principal="User:bob")
    assert not can(a, "orders", Op.WRITE)
    assert not can(a, "orders2")
    assert not can(a, "orders", resource_type=GROUP)


def test_deny_wins_over_allow_whatever_the_pattern_of_either() -> None:
    a = Authorizer(
        bindings=[
            acl("*", Op.ALL, principal="User:*"),
            acl("ord", Op.READ, DENY, pattern=PREFIXED),
            acl("orders", Op.READ),
        ]
    )
    assert not can(a, "orders")  # the prefixed DENY beats the literal and wildcard ALLOWs
    assert can(a, "orders", principal="User:bob")  # the DENY is alice's
    assert can(a, "orders", Op.WRITE)  # and only of READ
    assert can(a, "payments")


def test_prefixed_patterns_match_names_that_start_with_them() -> None:
    a = Authorizer(bindings=[acl("orders-", pattern=PREFIXED)])
    assert can(a, "orders-eu")
    assert can(a, "orders-")
    assert not can(a, "orders")
    assert not can(a, "my-orders-eu")


def test_the_wildcard_name_principal_and_host() -> None:
    a = Authorizer(
        bindings=[
            acl("*", principal="User:*"),
            acl("t", Op.WRITE, host="10.0.0.1"),
        ]
    )
    assert can(a, "anything", principal="User:anyone")
    assert can(a, "t", Op.WRITE)
    assert not can(a, "t", Op.WRITE, host="10.0.0.2")
    # "*" as a resource's own name is matched by the wildcard, once.
    assert can(a, "*", principal="User:x")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_read_write_delete_and_alter_imply_describe(granted: AclOperation) -> None:
    a = Authorizer(bindings=[acl("t", granted)])
    assert can(a, "t", Op.DESCRIBE)


def test_implication_is_one_way_and_only_of_allows() -> None:
    a = Authorizer(bindings=[acl("t", Op.DESCRIBE), acl("c", Op.ALTER_CONFIGS)])
    assert not can(a, "t", Op.READ)  # Describe implies nothing
    assert can(a, "c", Op.DESCRIBE_CONFIGS)
    assert not can(a, "c", Op.DESCRIBE)  # ALTER_CONFIGS implies DESCRIBE_CONFIGS alone
    # A DENY of READ does not deny DESCRIBE.
    denied = Authorizer(bindings=[acl("t", Op.ALL), acl("t", Op.READ, DENY)])
    assert can(denied, "t", Op.DESCRIBE)
    assert not can(denied, "t", Op.READ)


def test_all_matches_every_operation_in_an_allow_and_a_deny() -> None:
    allowed = Authorizer(bindings=[acl("t", Op.ALL)])
    assert all(can(allowed, "t", op) for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER))
    denied = Authorizer(bindings=[acl("*", Op.ALL), acl("t", Op.ALL, DENY)])
    assert not any(can(denied, "t", op) for op in (Op.READ, Op.DESCRIBE, Op.ALTER))
    assert can(denied, "u", Op.READ)


def test_super_users_may_do_everything_even_what_a_deny_names() -> None:
    a = Authorizer(["User:admin"], bindings=[acl("t", Op.ALL, DENY, principal="User:admin")])
    assert can(a, "t", Op.ALTER, principal="User:admin")
    assert can(a, "kafka-cluster", Op.ALTER, principal="User:admin", resource_type=CLUSTER)
    assert not can(a, "t", principal="User:alice")


def test_a_resource_without_acls_is_denied_unless_everyone_is_allowed() -> None:
    assert not can(Authorizer(), "t")
    everyone = Authorizer(allow_everyone_if_no_acl_found=True, bindings=[acl("t")])
    assert can(everyone, "u", principal="User:bob")  # no ACL on u at all
    # t has an ACL (alice's): bob is not let in by the setting.
    assert not can(everyone, "t", principal="User:bob")


def test_removed_bindings_leave_no_trace_in_the_index() -> None:
    a = Authorizer(bindings=[acl("or", pattern=PREFIXED), acl("orders"), acl("*")])
    removed = a.remove([AclBindingFilter(resource_name="or", pattern_type=PREFIXED)])
    assert removed == [acl("or", pattern=PREFIXED)]
    assert a.remove([AclBindingFilter(resource_name="or", pattern_type=PREFIXED)]) == []
    assert can(a, "orders") and can(a, "other")
    assert a.discard(acl("*")) and not a.discard(acl("*"))
    assert can(a, "orders") and not can(a, "other")
    assert len(a) == 1 and acl("orders") in a


def test_authorized_operations_are_the_bits_of_the_operations_allowed() -> None:
    a = Authorizer(bindings=[acl("g", Op.READ, resource_type=GROUP)])
    bits = a.authorized_operations("User:alice", HOST, GROUP, "g")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert Authorizer(["User:root"]).authorized_operations("User:root", HOST, GROUP, "g") == (
        (1 << Op.READ) | (1 << Op.DESCRIBE) | (1 << Op.DELETE)
    )


# -- the configuration's bindings -----------------------------------------------------------


def test_configuration_entries_are_read_in_any_case() -> None:
    entry = AclEntry(
        principal="User:alice",
        resource_type="group",
        resource_name="orders-",
        operation="DescribeConfigs",
        permission="deny",
        pattern_type="Prefixed",
    )
    assert binding_from_entry(entry) == AclBinding(
        GROUP, "orders-", PREFIXED, "User:alice", "*", Op.DESCRIBE_CONFIGS, DENY
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"resource_type": "topics"}, "resource type 'topics' is not one of TOPIC, GROUP"),
        ({"resource_type": "any"}, "resource type 'any' is not one of"),
        ({"pattern_type": "match"}, "pattern type 'match' is not one of LITERAL, PREFIXED"),
        ({"operation": "any"}, "operation 'any' is not one of ALL, READ"),
        ({"permission": "maybe"}, "permission 'maybe' is not one of DENY, ALLOW"),
        ({"principal": "alice"}, "Could not parse principal from `alice`"),
        ({"resource_name": ""}, "Resource name should not be empty"),
        ({"resource_type": "cluster"}, "The only valid name for the CLUSTER resource"),
    ],
)
def test_a_bad_configuration_entry_is_refused_with_what_is_wrong(
    fields: dict[str, str], message: str
) -> None:
    values = {
        "principal": "User:alice",
        "resource_type": "topic",
        "resource_name": "t",
        "operation": "read",
    } | fields
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        binding_from_entry(AclEntry(**values))


def test_unknown_wire_codes_are_unknown_and_refused() -> None:
    binding = binding_of(99, "t", 3, "User:a", "*", 3, 3)
    assert binding.resource_type == ResourceType.UNKNOWN
    assert binding.invalid() == "Invalid resourceType UNKNOWN"
    assert binding_of(2, "t", 2, "User:a", "*", 3, 3).invalid() == "Invalid patternType MATCH"
    assert binding_of(2, "t", 3, "User:a", "*", 1, 3).invalid() == "Invalid operation ANY"
    assert binding_of(2, "t", 3, "User:a", "*", 3, 1).invalid() == "Invalid permissionType ANY"
    assert binding_of(2, "t", 3, "User:a", "*", 3, 3).invalid() is None
    assert (
        filter_of(0, None, 1, None, None, 1, 1).unknown() == "Filter has an UNKNOWN resource type"
    )
    assert filter_of(1, None, 1, None, None, 1, 1).unknown() is None


# -- filters (DescribeAcls, DeleteAcls) ---------------------------------------------------------

BINDINGS = [
    acl("orders"),
    acl("*", principal="User:*"),
    acl("ord", Op.WRITE, DENY, pattern=PREFIXED),
    acl("orders", Op.READ, resource_type=GROUP),
]


def described(f: AclBindingFilter) -> list[AclBinding]:
    return [b for b in BINDINGS if f.matches(b)]


def test_a_filter_of_nothing_but_any_matches_everything() -> None:
    assert described(AclBindingFilter()) == BINDINGS


def test_any_pattern_compares_the_name_as_it_is() -> None:
    assert described(AclBindingFilter(resource_name="orders")) == [BINDINGS[0], BINDINGS[3]]
    assert described(AclBindingFilter(resource_name="*")) == [BINDINGS[1]]
    assert described(AclBindingFilter(TOPIC, "ord", PREFIXED)) == [BINDINGS[2]]
    assert described(AclBindingFilter(TOPIC, "orders", PREFIXED)) == []


def test_match_finds_every_pattern_that_applies_to_the_resource() -> None:
    f = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert described(f) == BINDINGS[:3]
    assert described(AclBindingFilter(TOPIC, "payments", PatternType.MATCH)) == [BINDINGS[1]]


def test_entry_fields_filter_when_given() -> None:
    assert described(AclBindingFilter(principal="User:*")) == [BINDINGS[1]]
    assert described(AclBindingFilter(operation=Op.WRITE)) == [BINDINGS[2]]
    assert described(AclBindingFilter(permission=DENY)) == [BINDINGS[2]]
    assert described(AclBindingFilter(host="10.0.0.1")) == []
    assert described(AclBindingFilter(resource_type=GROUP)) == [BINDINGS[3]]


def test_describe_and_remove_use_the_filter() -> None:
    a = Authorizer(bindings=BINDINGS)
    assert a.describe(AclBindingFilter(resource_type=GROUP)) == [BINDINGS[3]]
    assert set(a.remove([AclBindingFilter(principal="User:*"), AclBindingFilter()])) == set(
        BINDINGS
    )
    assert len(a) == 0


# -- the index against a walk over every binding ----------------------------------------------

NAMES = ["a", "ab", "abc", "b", "ba", "*", "abd"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["*", "10.0.0.1", "10.0.0.2"]
OPERATIONS = [
    Op.ALL,
    Op.READ,
    Op.WRITE,
    Op.DELETE,
    Op.ALTER,
    Op.DESCRIBE,
    Op.ALTER_CONFIGS,
    Op.DESCRIBE_CONFIGS,
    Op.CREATE,
]

bindings = st.builds(
    AclBinding,
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from(NAMES),
    st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPERATIONS),
    st.sampled_from([ALLOW, DENY]),
)
queries = st.tuples(
    st.sampled_from(["User:alice", "User:bob", "User:carol", "User:root"]),
    st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    st.sampled_from([op for op in OPERATIONS if op != Op.ALL]),
    st.sampled_from([TOPIC, GROUP]),
    st.sampled_from([*NAMES, "abcd", "", "c"]),
)


def naive(
    acls: list[AclBinding],
    supers: set[str],
    everyone: bool,
    query: tuple[str, str, AclOperation, ResourceType, str],
) -> bool:
    """Kafka's rule, written as plainly as possible: every binding looked at."""
    principal, host, operation, resource_type, name = query
    if principal in supers:
        return True
    on_resource = [
        b
        for b in acls
        if b.resource_type == resource_type
        and (
            (b.pattern_type == LITERAL and b.resource_name in (name, "*"))
            or (b.pattern_type == PREFIXED and name.startswith(b.resource_name))
        )
    ]
    matching = [
        b for b in on_resource if b.principal in (principal, "User:*") and b.host in (host, "*")
    ]
    implies = {
        Op.DESCRIBE: {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE},
        Op.DESCRIBE_CONFIGS: {Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS},
    }
    if any(b.permission == DENY and b.operation in (Op.ALL, operation) for b in matching):
        return False
    if any(
        b.permission == ALLOW
        and (b.operation in (Op.ALL, operation) or b.operation in implies.get(operation, ()))
        for b in matching
    ):
        return True
    return everyone and not on_resource


@settings(max_examples=300, deadline=None)
@given(
    st.lists(bindings, max_size=25),
    st.lists(bindings, max_size=8),
    st.lists(queries, min_size=1, max_size=20),
    st.booleans(),
)
def test_the_index_decides_as_a_walk_over_every_binding(
    acls: list[AclBinding],
    removed: list[AclBinding],
    asked: list[tuple[str, str, AclOperation, ResourceType, str]],
    everyone: bool,
) -> None:
    a = Authorizer(["User:root"], everyone, acls + removed)
    for binding in removed:
        a.discard(binding)
    kept = [b for b in dict.fromkeys(acls) if b not in removed]
    assert sorted(a, key=repr) == sorted(kept, key=repr)
    for query in asked:
        assert a.authorize(*query) == naive(kept, {"User:root"}, everyone, query), query
