"""DescribeAcls, CreateAcls and DeleteAcls: the ACLs clients manage, kept in the offsets log.

ACLs that a client creates must outlive a restart, as groups and offsets do, so they are
written to the same log, through the same appends: one record per binding in offsets
partition 0 (records.py, AclKey), a tombstone when it is deleted. A CreateAcls or
DeleteAcls is answered only once its records are durable, and the ACLs in force change
only by replaying those records, live or at load. The ACLs of the configuration are put
in force at start and never written: a DeleteAcls takes one out of force until the next
start (its tombstone is not applied to them when the log is loaded).

The authorizer (security/acl.py) is the server's: it checks every request before the
core sees it, including these three (Describe or Alter on the cluster), so that what
reaches this module is allowed. Without an authorizer (authorizer.class.name unset) all
three are answered SECURITY_DISABLED, as Kafka answers them. Only the node that owns
partition 0 writes ACLs; another node of a cluster answers CreateAcls and DeleteAcls
NOT_CONTROLLER, and DescribeAcls with the ACLs it enforces (those of its configuration).
"""

from __future__ import annotations

from fastcoord.core.offsets import storage_error
from fastcoord.core.records import ACL_PARTITION, AclKey, AclValue, Record
from fastcoord.core.result import Call, Result
from fastcoord.core.runtime import Runtime
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import (
    AclCreationResult,
    AclDescription,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from fastcoord.security.acl import AclBinding, Authorizer, binding_of, filter_of

NO_AUTHORIZER = "No Authorizer is configured."
NOT_KEPT_HERE = "ACLs are kept by the node that owns offsets partition 0 (the cluster's controller)"
LOADING = "ACLs are being loaded"


def key_of(binding: AclBinding) -> AclKey:
    return AclKey(
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission),
    )


def binding_of_key(key: AclKey) -> AclBinding:
    return binding_of(
        key.resource_type,
        key.resource_name,
        key.pattern_type,
        key.principal,
        key.host,
        key.operation,
        key.permission_type,
    )


class AclManager:
    """The durable ACLs, and the three requests that read and change them."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.authorizer: Authorizer | None = None
        self.configured: frozenset[AclBinding] = frozenset()
        # The bindings whose latest record says they exist, whether or not an authorizer
        # applies them: what a CreateAcls need not write again.
        self.durable: set[AclBinding] = set()

    def enable(self, authorizer: Authorizer, configured: frozenset[AclBinding]) -> None:
        """Check requests with `authorizer` (which holds the configuration's ACLs,
        `configured`) and keep it in step with the log."""
        self.authorizer = authorizer
        self.configured = configured
        authorizer.add(self.durable)

    # -- replay -------------------------------------------------------------------------

    def replay(self, key: AclKey, exists: bool, loading: bool) -> None:
        binding = binding_of_key(key)
        authorizer = self.authorizer
        if exists:
            self.durable.add(binding)
            if authorizer is not None:
                authorizer.add((binding,))
            return
        self.durable.discard(binding)
        # A configured ACL deleted during an earlier run is in force again at each start.
        if authorizer is not None and not (loading and binding in self.configured):
            authorizer.discard(binding)

    def resign(self) -> None:
        """Partition 0 moved to another node: the ACLs of the log leave with it (its new
        owner loads them); those of the configuration stay in force."""
        authorizer = self.authorizer
        if authorizer is not None:
            for binding in self.durable - self.configured:
                authorizer.discard(binding)
        self.durable.clear()

    # -- requests -----------------------------------------------------------------------

    def _refusal(self, writes: bool) -> tuple[ErrorCode, str | None] | None:
        """Why these ACLs cannot be read (or, when `writes`, changed) here now, or None."""
        runtime = self.runtime
        if self.authorizer is None:
            return ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER
        if not runtime.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if not writes:
            return None
        owned = runtime.owned_partitions
        if owned is not None and ACL_PARTITION not in owned:
            return ErrorCode.NOT_CONTROLLER, NOT_KEPT_HERE
        if ACL_PARTITION in runtime.loading_partitions:
            # Written now, a record would be overtaken by the older ones still to replay.
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, LOADING
        return None

    def describe_acls(self, call: Call, req: DescribeAclsRequest) -> None:
        refused = self._refusal(writes=False)
        if refused is not None:
            call.respond(DescribeAclsResponse(error_code=refused[0], error_message=refused[1]))
            return
        assert self.authorizer is not None
        acl_filter = filter_of(
            req.resource_type_filter,
            req.resource_name_filter,
            req.pattern_type_filter,
            req.principal_filter,
            req.host_filter,
            req.operation,
            req.permission_type,
        )
        unknown = acl_filter.unknown()
        if unknown is not None:
            call.respond(
                DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=unknown)
            )
            return
        resources: list[DescribeAclsResource] = []
        for b in self.authorizer.describe(acl_filter):  # sorted: a resource's ACLs together
            last = resources[-1] if resources else None
            if last is None or (last.resource_type, last.resource_name, last.pattern_type) != (
                b.resource_type,
                b.resource_name,
                b.pattern_type,
            ):
                last = DescribeAclsResource(b.resource_type, b.resource_name, b.pattern_type, [])
                resources.append(last)
            last.acls.append(AclDescription(b.principal, b.host, b.operation, b.permission))
        call.respond(DescribeAclsResponse(error_code=ErrorCode.NONE, resources=resources))

    def create_acls(self, call: Call, req: CreateAclsRequest) -> None:
        refused = self._refusal(writes=True)
        if refused is not None:
            code, message = refused
            call.respond(
                CreateAclsResponse(
                    results=[AclCreationResult(code, message) for _ in req.creations]
                )
            )
            return
        results: list[AclCreationResult] = []
        written: list[int] = []  # the results that wait for the records
        records: dict[AclBinding, Record] = {}
        for c in req.creations:
            binding = binding_of(
                c.resource_type,
                c.resource_name,
                c.resource_pattern_type,
                c.principal,
                c.host,
                c.operation,
                c.permission_type,
            )
            why = binding.invalid()
            if why is not None:
                results.append(AclCreationResult(ErrorCode.INVALID_REQUEST, why))
                continue
            if binding not in self.durable:  # creating an ACL that exists changes nothing
                records.setdefault(binding, Record(key_of(binding), AclValue()))
                written.append(len(results))
            results.append(AclCreationResult(ErrorCode.NONE, None))
        if not records:
            call.respond(CreateAclsResponse(results=results))
            return

        def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
            if error == ErrorCode.NONE:
                for record in records.values():
                    assert isinstance(record.key, AclKey)
                    self.replay(record.key, True, loading=False)
            else:
                for i in written:
                    results[i] = AclCreationResult(storage_error(error), None)
            result.respond(call.handle, CreateAclsResponse(results=results))

        self.runtime.append(call.result, list(records.values()), stored)

    def delete_acls(self, call: Call, req: DeleteAclsRequest) -> None:
        refused = self._refusal(writes=True)
        if refused is not None:
            code, message = refused
            call.respond(
                DeleteAclsResponse(
                    filter_results=[DeleteAclsFilterResult(code, message, []) for _ in req.filters]
                )
            )
            return
        assert self.authorizer is not None
        # Each filter's result lists what it matched, even a binding an earlier filter of the
        # request matched too; each binding gets one tombstone.
        matched: list[list[AclBinding] | str] = []
        tombstones: dict[AclBinding, Record] = {}
        for f in req.filters:
            acl_filter = filter_of(
                f.resource_type_filter,
                f.resource_name_filter,
                f.pattern_type_filter,
                f.principal_filter,
                f.host_filter,
                f.operation,
                f.permission_type,
            )
            unknown = acl_filter.unknown()
            if unknown is not None:
                matched.append(unknown)
                continue
            bindings = self.authorizer.describe(acl_filter)
            matched.append(bindings)
            for binding in bindings:
                tombstones.setdefault(binding, Record(key_of(binding), None))

        def respond(result: Result, error: ErrorCode) -> None:
            out = []
            for m in matched:
                if isinstance(m, str):
                    out.append(DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, m, []))
                elif error != ErrorCode.NONE:
                    out.append(DeleteAclsFilterResult(storage_error(error), None, []))
                else:
                    out.append(DeleteAclsFilterResult(ErrorCode.NONE, None, _matching(m)))
            result.respond(call.handle, DeleteAclsResponse(filter_results=out))

        if not tombstones:
            respond(call.result, ErrorCode.NONE)
            return

        def stored(error: ErrorCode, now_ms: int, result: Result) -> None:
            if error == ErrorCode.NONE:
                for record in tombstones.values():
                    assert isinstance(record.key, AclKey)
                    self.replay(record.key, False, loading=False)
            respond(result, error)

        self.runtime.append(call.result, list(tombstones.values()), stored)


def _matching(bindings: list[AclBinding]) -> list[DeleteAclsMatchingAcl]:
    return [
        DeleteAclsMatchingAcl(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=b.resource_type,
            resource_name=b.resource_name,
            pattern_type=b.pattern_type,
            principal=b.principal,
            host=b.host,
            operation=b.operation,
            permission_type=b.permission,
        )
        for b in bindings
    ]
