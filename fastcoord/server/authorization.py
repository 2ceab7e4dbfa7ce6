"""Authorization: Kafka's ACL checks, made before a request reaches the core or the broker.

With `authorizer.class.name` set, every request is checked as Kafka's KafkaApis checks it
("Operations and Resources on Protocols" in Kafka's security documentation), against the
principal of its connection and the host it came from. This module must never let the
core see a part of a request that the principal may not touch, and must answer refusals
exactly where Kafka puts them:

- a request refused as a whole gets its API's error answer (error_responses.py) with
  GROUP_AUTHORIZATION_FAILED (30), TOPIC_AUTHORIZATION_FAILED (29) or
  CLUSTER_AUTHORIZATION_FAILED (31), and goes no further;
- where Kafka refuses part of a request (the partitions of a topic the principal may not
  read, a group of a batch it may not describe), the core gets the request without that
  part, and the answer gets it back with the error, in request order, through the slot's
  `reply_filter` (applied to the answer just before it is encoded, whenever it comes);
- lists that the principal may not see are shortened, never refused: ListGroups without
  Describe on the cluster lists the groups it may describe, an every-topic Metadata the
  topics it may describe, an all-offsets OffsetFetch the topics it may describe.

ApiVersions (and the SASL exchange) is always allowed. A super user passes unchanged,
after one set lookup. Until the ACLs of the log are loaded, requests that an ACL could
refuse wait (`loading` and `defer`, set by the server): answered earlier, they would be
judged by the configuration's ACLs alone. Sans-IO apart from the slot it answers: no
socket, no clock.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from msgspec.structs import replace

from fastcoord.cluster.routing import OFFSETS_TOPIC
from fastcoord.protocol.commit_batch import OffsetCommitAnswer, OffsetCommitBatch
from fastcoord.protocol.error_responses import error_response
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.headers import RequestHeader
from fastcoord.protocol.messages import (
    AclCreationResult,
    ConsumerGroupDescribedGroup,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    Coordinator,
    CreateAclsRequest,
    CreateAclsResponse,
    DeletableGroupResult,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseTopic,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
    PartitionData,
    SyncGroupRequest,
)
from fastcoord.protocol.primitives import ZERO_UUID
from fastcoord.protocol.schema import Request
from fastcoord.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    Authorizer,
    ResourceType,
)

if TYPE_CHECKING:
    from fastcoord.server.broker import Broker
    from fastcoord.server.connection import Slot

Served = Request | OffsetCommitBatch
# (operation, resource type, name) -> allowed, for the principal and host of one request
Can = Callable[[AclOperation, ResourceType, str], bool]
T = TypeVar("T")

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
ALTER, CREATE = AclOperation.ALTER, AclOperation.CREATE
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
CLUSTER_DENIED_MESSAGE = "Cluster authorization failed."  # Kafka's message for the code
KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION = 0, 1  # FindCoordinator's key types
FIRST_FIND_COORDINATOR_KEYS = 4
FIRST_OFFSET_FETCH_GROUPS = 8
FIRST_OFFSET_FETCH_TOP_LEVEL_ERROR = 2
FIRST_METADATA_BY_ID = 12
FIRST_METADATA_CREATION_FLAG = 4  # before it, every Metadata request allows auto-creation
NOT_REQUESTED = -(2**31)  # an authorized-operations field the client did not ask for
NO_OFFSET = -1
# Kafka's message for a ConsumerGroupDescribe of a group whose assignments name a topic
# the client may not describe: the group is answered with it, without its members.
UNDESCRIBABLE_TOPICS = (
    "The group has described topic(s) that the client is not authorized to describe."
)
ACL_REQUESTS = (DescribeAclsRequest, CreateAclsRequest, DeleteAclsRequest)


class Authorization:
    def __init__(self, authorizer: Authorizer, broker: Broker) -> None:
        """`broker` answers the Metadata requests that authorization shortens, for
        connections without a listener of their own (a listener has its own broker view,
        which names its address)."""
        self.authorizer = authorizer
        self.broker = broker
        # Set by the server: whether the ACLs of the log are still being loaded, and what
        # keeps a request until they are (and then admits it again).
        self.loading: Callable[[], bool] | None = None
        self.defer: Callable[[Slot, RequestHeader | None, Served], None] | None = None
        checks: dict[type[Any], Callable[[Slot, Any, Can, int], Served | None]] = {
            FindCoordinatorRequest: self._find_coordinator,
            JoinGroupRequest: self._read_group,
            HeartbeatRequest: self._read_group,
            LeaveGroupRequest: self._read_group,
            SyncGroupRequest: self._read_group,
            OffsetCommitBatch: self._offset_commit,
            OffsetCommitRequest: self._offset_commit_request,
            OffsetFetchRequest: self._offset_fetch,
            DescribeGroupsRequest: self._describe_groups,
            DeleteGroupsRequest: self._delete_groups,
            ListGroupsRequest: self._list_groups,
            OffsetDeleteRequest: self._offset_delete,
            ConsumerGroupHeartbeatRequest: self._consumer_group_heartbeat,
            ConsumerGroupDescribeRequest: self._consumer_group_describe,
            MetadataRequest: self._metadata,
            ListOffsetsRequest: self._list_offsets,
            FetchRequest: self._fetch,
            DescribeAclsRequest: self._describe_acls,
            CreateAclsRequest: self._alter_acls,
            DeleteAclsRequest: self._alter_acls,
        }
        self._checks = checks

    def admit(self, slot: Slot, header: RequestHeader | None, request: Served) -> Served | None:
        """The request as the core may see it (the request itself, or one without the parts
        the principal may not touch), or None when it has been answered (refused) or kept
        until the ACLs are loaded. `header` is None for an OffsetCommit handed over with
        others (Server.commit_offsets)."""
        check = self._checks.get(type(request))
        if check is None:  # ApiVersions, the SASL exchange, Produce (refused to all): allowed
            return request
        conn = slot.conn
        principal = conn.principal
        authorizer = self.authorizer
        superuser = principal in authorizer.super_users
        loading = self.loading
        if (
            loading is not None
            and (not superuser or isinstance(request, ACL_REQUESTS))
            and loading()
        ):
            assert self.defer is not None, "a server that says when ACLs load keeps requests"
            self.defer(slot, header, request)
            return None
        if superuser:
            return request
        host = conn.client_host
        if host.startswith("/"):  # Java's InetAddress.toString(); ACLs name the address
            host = host[1:]
        return check(slot, request, partial(authorizer.authorize, principal, host), slot.version)

    # -- groups -------------------------------------------------------------------------

    @staticmethod
    def _read_group(slot: Slot, req: Any, can: Can, version: int) -> Served | None:
        """JoinGroup, Heartbeat, LeaveGroup, SyncGroup: Read on the group, else 30."""
        if can(READ, GROUP, req.group_id):
            return req  # type: ignore[no-any-return]
        slot.answer(error_response(req, version, GROUP_DENIED))
        return None

    @staticmethod
    def _find_coordinator(
        slot: Slot, req: FindCoordinatorRequest, can: Can, version: int
    ) -> Served | None:
        """Describe on the group (or the transactional id), per key from v4."""
        if req.key_type == KEY_TYPE_GROUP:
            resource, code = GROUP, GROUP_DENIED
        elif req.key_type == KEY_TYPE_TRANSACTION:
            resource, code = TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        else:
            return req  # no resource to check: the broker refuses the key type
        if version < FIRST_FIND_COORDINATOR_KEYS:
            if can(DESCRIBE, resource, req.key):
                return req
            slot.answer(error_response(req, version, code))
            return None
        keys = req.coordinator_keys
        denied = {
            i: Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=None)
            for i, k in enumerate(keys)
            if not can(DESCRIBE, resource, k)
        }
        if not denied:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, FindCoordinatorResponse):
                return resp
            coordinators = _in_request_order(keys, denied, resp.coordinators, _key)
            return replace(resp, coordinators=coordinators)

        return _narrowed(
            slot,
            merge,
            [k for i, k in enumerate(keys) if i not in denied],
            lambda allowed: replace(req, coordinator_keys=allowed),
            FindCoordinatorResponse(coordinators=[]),
        )

    def _describe_groups(
        self, slot: Slot, req: DescribeGroupsRequest, can: Can, version: int
    ) -> Served | None:
        """Describe on each group: 30 in that group's entry. The groups described carry the
        operations the principal may do on them, when asked for."""
        groups = req.groups
        denied = {
            i: DescribedGroup(error_code=GROUP_DENIED, group_id=g)
            for i, g in enumerate(groups)
            if not can(DESCRIBE, GROUP, g)
        }
        operations = self._operations(slot, GROUP) if req.include_authorized_operations else None
        if not denied and operations is None:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, DescribeGroupsResponse):
                return resp
            described = _in_request_order(groups, denied, resp.groups, _group_id)
            if operations is not None:
                described = [
                    g
                    if g.error_code or g.authorized_operations == NOT_REQUESTED
                    else replace(g, authorized_operations=operations(g.group_id))
                    for g in described
                ]
            return replace(resp, groups=described)

        return _narrowed(
            slot,
            merge,
            [g for i, g in enumerate(groups) if i not in denied],
            lambda allowed: replace(req, groups=allowed),
            DescribeGroupsResponse(groups=[]),
        )

    @staticmethod
    def _delete_groups(
        slot: Slot, req: DeleteGroupsRequest, can: Can, version: int
    ) -> Served | None:
        """Delete on each group: 30 in that group's result."""
        groups = req.groups_names
        denied = {
            i: DeletableGroupResult(g, GROUP_DENIED)
            for i, g in enumerate(groups)
            if not can(DELETE, GROUP, g)
        }
        if not denied:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, DeleteGroupsResponse):
                return resp
            return replace(resp, results=_in_request_order(groups, denied, resp.results, _group_id))

        return _narrowed(
            slot,
            merge,
            [g for i, g in enumerate(groups) if i not in denied],
            lambda allowed: replace(req, groups_names=allowed),
            DeleteGroupsResponse(results=[]),
        )

    @staticmethod
    def _list_groups(slot: Slot, req: ListGroupsRequest, can: Can, version: int) -> Served:
        """Every group with Describe on the cluster, else those the principal may describe;
        never an error (KIP-231)."""
        if can(DESCRIBE, CLUSTER, CLUSTER_NAME):
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, ListGroupsResponse):
                return resp
            return replace(
                resp, groups=[g for g in resp.groups if can(DESCRIBE, GROUP, g.group_id)]
            )

        slot.reply_filter = merge
        return req

    @staticmethod
    def _consumer_group_heartbeat(
        slot: Slot, req: ConsumerGroupHeartbeatRequest, can: Can, version: int
    ) -> Served | None:
        """Read on the group (30); Describe on each subscribed topic named (29, at the top
        level, as Kafka 4 answers)."""
        if not can(READ, GROUP, req.group_id):
            slot.answer(error_response(req, version, GROUP_DENIED))
            return None
        names = req.subscribed_topic_names
        if names and not all(can(DESCRIBE, TOPIC, t) for t in set(names)):
            slot.answer(error_response(req, version, TOPIC_DENIED))
            return None
        return req

    def _consumer_group_describe(
        self, slot: Slot, req: ConsumerGroupDescribeRequest, can: Can, version: int
    ) -> Served | None:
        """Describe on each group (30 in its entry); a group whose members' assignments
        name a topic the principal may not describe is answered 29, without its members."""
        groups = req.group_ids
        denied = {
            i: ConsumerGroupDescribedGroup(error_code=GROUP_DENIED, group_id=g)
            for i, g in enumerate(groups)
            if not can(DESCRIBE, GROUP, g)
        }
        operations = self._operations(slot, GROUP) if req.include_authorized_operations else None

        def hide(group: ConsumerGroupDescribedGroup) -> ConsumerGroupDescribedGroup:
            if group.error_code:
                return group
            topics = {
                tp.topic_name
                for m in group.members
                for assignment in (m.assignment, m.target_assignment)
                for tp in assignment.topic_partitions
            }
            if not all(can(DESCRIBE, TOPIC, t) for t in topics):
                return ConsumerGroupDescribedGroup(
                    error_code=TOPIC_DENIED,
                    error_message=UNDESCRIBABLE_TOPICS,
                    group_id=group.group_id,
                )
            if operations is not None and group.authorized_operations != NOT_REQUESTED:
                return replace(group, authorized_operations=operations(group.group_id))
            return group

        def merge(resp: Any) -> Any:
            if not isinstance(resp, ConsumerGroupDescribeResponse):
                return resp
            described = _in_request_order(groups, denied, resp.groups, _group_id)
            return replace(resp, groups=[hide(g) for g in described])

        return _narrowed(
            slot,
            merge,
            [g for i, g in enumerate(groups) if i not in denied],
            lambda allowed: replace(req, group_ids=allowed),
            ConsumerGroupDescribeResponse(groups=[]),
        )

    # -- offsets ------------------------------------------------------------------------

    @staticmethod
    def _offset_commit(
        slot: Slot, batch: OffsetCommitBatch, can: Can, version: int
    ) -> Served | None:
        """Read on the group (30 on every partition), then Read on each topic: 29 on the
        partitions of the others, which the core never sees; the rest are committed."""
        if not can(READ, GROUP, batch.group_id):
            slot.answer(OffsetCommitAnswer(batch, GROUP_DENIED))
            return None
        denied_topics = {t for t in set(batch.topics) if not can(READ, TOPIC, t)}
        if not denied_topics:
            return batch
        entry_of = batch.entry_of()
        topics = batch.topics
        keep = [k for k, entry in enumerate(entry_of) if topics[entry] not in denied_topics]

        def merge(answer: Any) -> Any:
            if not isinstance(answer, OffsetCommitAnswer):
                return answer
            errors = array("h", [TOPIC_DENIED]) * len(batch)
            for j, k in enumerate(keep):
                errors[k] = answer.error_of(j)
            return OffsetCommitAnswer(batch, ErrorCode.NONE, errors)

        slot.reply_filter = merge
        if not keep:
            slot.answer(OffsetCommitAnswer(batch.select([])))
            return None
        return batch.select(keep)

    def _offset_commit_request(
        self, slot: Slot, req: OffsetCommitRequest, can: Can, version: int
    ) -> Served | None:
        # The server decodes OffsetCommits into batches; a request object is checked as one.
        return self._offset_commit(slot, OffsetCommitBatch.from_request(req, version), can, version)

    @staticmethod
    def _offset_fetch(slot: Slot, req: OffsetFetchRequest, can: Can, version: int) -> Served | None:
        """Describe on each group (30: top level before v8, in the group's entry from v8),
        then Describe on each topic: 29 on each partition asked of the others, and an
        all-offsets fetch leaves them out."""
        if version < FIRST_OFFSET_FETCH_GROUPS:
            if not can(DESCRIBE, GROUP, req.group_id):
                slot.answer(error_response(req, version, GROUP_DENIED))
                return None
            if req.topics is None:
                slot.reply_filter = partial(_describable_offsets, can)
                return req
            names = [t.name for t in req.topics]
            denied = {
                i: OffsetFetchResponseTopic(
                    t.name,
                    [
                        OffsetFetchResponsePartition(p, NO_OFFSET, -1, "", TOPIC_DENIED)
                        for p in t.partition_indexes
                    ],
                )
                for i, t in enumerate(req.topics)
                if not can(DESCRIBE, TOPIC, t.name)
            }
            if not denied:
                return req

            def merge(resp: Any) -> Any:
                if not isinstance(resp, OffsetFetchResponse) or (
                    version >= FIRST_OFFSET_FETCH_TOP_LEVEL_ERROR and resp.error_code
                ):
                    return resp  # the group's error stands for every partition
                return replace(resp, topics=_in_request_order(names, denied, resp.topics, _name))

            slot.reply_filter = merge
            return replace(req, topics=[t for i, t in enumerate(req.topics) if i not in denied])
        return _offset_fetch_groups(slot, req, can)

    @staticmethod
    def _offset_delete(
        slot: Slot, req: OffsetDeleteRequest, can: Can, version: int
    ) -> Served | None:
        """Delete on the group (30 at the top level), then Read on each topic (29 on its
        partitions)."""
        if not can(DELETE, GROUP, req.group_id):
            slot.answer(error_response(req, version, GROUP_DENIED))
            return None
        names = [t.name for t in req.topics]
        denied = {
            i: OffsetDeleteResponseTopic(
                t.name,
                [
                    OffsetDeleteResponsePartition(p.partition_index, TOPIC_DENIED)
                    for p in t.partitions
                ],
            )
            for i, t in enumerate(req.topics)
            if not can(READ, TOPIC, t.name)
        }
        if not denied:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, OffsetDeleteResponse) or resp.error_code:
                return resp  # Kafka: a group's error replaces the partitions' answers
            return replace(resp, topics=_in_request_order(names, denied, resp.topics, _name))

        slot.reply_filter = merge
        return replace(req, topics=[t for i, t in enumerate(req.topics) if i not in denied])

    # -- the broker's answers -----------------------------------------------------------

    def _metadata(self, slot: Slot, req: MetadataRequest, can: Can, version: int) -> Served | None:
        """Describe on each topic named (29 in its entry); an every-topic request lists the
        topics the principal may describe. A topic that the request would create needs
        Create on the cluster or on the topic, else it is answered 29.

        A shortened answer is built and sent here: the server sends Metadata as a frame,
        which no reply filter sees (so fault rules do not reach these answers)."""
        endpoint = slot.conn.endpoint
        broker = self.broker if endpoint is None else endpoint.broker
        every = req.topics is None or (version == 0 and not req.topics)
        if every:
            names = broker.topic_names()
            visible = sorted(n for n in names if can(DESCRIBE, TOPIC, n))
            if len(visible) == len(names):
                return req  # nothing to hide: the cached every-topic answer
            slot.answer(_metadata_of(broker, visible, version))
            return None
        requested = req.topics or []
        if any(t.topic_id != ZERO_UUID for t in requested):
            if version < FIRST_METADATA_BY_ID:
                return req  # the broker refuses the request as Kafka does
            # By id (v12+): an id the principal may not describe is answered 29 with its id
            # and no name (Kafka: topic ids are not sensitive).
            resp = broker.metadata(req, version)
            slot.answer(
                replace(
                    resp,
                    topics=[
                        t
                        if t.error_code or t.name is None or can(DESCRIBE, TOPIC, t.name)
                        else MetadataResponseTopic(
                            error_code=TOPIC_DENIED, name=None, topic_id=t.topic_id
                        )
                        for t in resp.topics
                    ],
                )
            )
            return None
        mode = broker.config.auto_create_topics
        creates = mode == "always" or (
            mode == "client"
            and (version < FIRST_METADATA_CREATION_FLAG or req.allow_auto_topic_creation)
        )
        may_create_any = creates and can(CREATE, CLUSTER, CLUSTER_NAME)
        names = [t.name or "" for t in requested]
        denied: dict[int, MetadataResponseTopic] = {}
        for i, name in enumerate(names):
            if not can(DESCRIBE, TOPIC, name) or (
                creates
                and not may_create_any
                and name != OFFSETS_TOPIC
                and broker.topic_by_name(name) is None
                and not can(CREATE, TOPIC, name)
            ):
                denied[i] = MetadataResponseTopic(
                    error_code=TOPIC_DENIED, name=name, is_internal=name == OFFSETS_TOPIC
                )
        if not denied:
            return req
        allowed = [n for i, n in enumerate(names) if i not in denied]
        resp = _metadata_of(broker, allowed, version, req.allow_auto_topic_creation)
        slot.answer(replace(resp, topics=_in_request_order(names, denied, resp.topics, _name)))
        return None

    @staticmethod
    def _list_offsets(slot: Slot, req: ListOffsetsRequest, can: Can, version: int) -> Served | None:
        """Describe on each topic: 29 on its partitions."""
        names = [t.name for t in req.topics]
        denied = {
            i: ListOffsetsTopicResponse(
                t.name,
                [
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=TOPIC_DENIED,
                        timestamp=-1,
                        offset=NO_OFFSET,
                        leader_epoch=-1,
                    )
                    for p in t.partitions
                ],
            )
            for i, t in enumerate(req.topics)
            if not can(DESCRIBE, TOPIC, t.name)
        }
        if not denied:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, ListOffsetsResponse):
                return resp
            return replace(resp, topics=_in_request_order(names, denied, resp.topics, _name))

        return _narrowed(
            slot,
            merge,
            [t for i, t in enumerate(req.topics) if i not in denied],
            lambda kept: replace(req, topics=kept),
            ListOffsetsResponse(topics=[]),
        )

    @staticmethod
    def _fetch(slot: Slot, req: FetchRequest, can: Can, version: int) -> Served | None:
        """Read on each topic: 29 on its partitions. With none left, the answer is not
        made to wait for max_wait_ms."""
        names = [t.topic for t in req.topics]
        denied = {
            i: FetchableTopicResponse(
                t.topic,
                [
                    PartitionData(
                        partition_index=p.partition,
                        error_code=TOPIC_DENIED,
                        high_watermark=NO_OFFSET,
                        last_stable_offset=NO_OFFSET,
                        log_start_offset=NO_OFFSET,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=b"",
                    )
                    for p in t.partitions
                ],
            )
            for i, t in enumerate(req.topics)
            if not can(READ, TOPIC, t.topic)
        }
        if not denied:
            return req

        def merge(resp: Any) -> Any:
            if not isinstance(resp, FetchResponse):
                return resp
            return replace(resp, responses=_in_request_order(names, denied, resp.responses, _topic))

        return _narrowed(
            slot,
            merge,
            [t for i, t in enumerate(req.topics) if i not in denied],
            lambda kept: replace(req, topics=kept),
            FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=[]),
        )

    # -- ACLs ---------------------------------------------------------------------------

    @staticmethod
    def _describe_acls(
        slot: Slot, req: DescribeAclsRequest, can: Can, version: int
    ) -> Served | None:
        """Describe on the cluster, else 31."""
        if can(DESCRIBE, CLUSTER, CLUSTER_NAME):
            return req
        slot.answer(
            DescribeAclsResponse(error_code=CLUSTER_DENIED, error_message=CLUSTER_DENIED_MESSAGE)
        )
        return None

    @staticmethod
    def _alter_acls(
        slot: Slot, req: CreateAclsRequest | DeleteAclsRequest, can: Can, version: int
    ) -> Served | None:
        """Alter on the cluster, else 31 in every result."""
        if can(ALTER, CLUSTER, CLUSTER_NAME):
            return req
        if isinstance(req, CreateAclsRequest):
            slot.answer(
                CreateAclsResponse(
                    results=[
                        AclCreationResult(CLUSTER_DENIED, CLUSTER_DENIED_MESSAGE)
                        for _ in req.creations
                    ]
                )
            )
        else:
            slot.answer(
                DeleteAclsResponse(
                    filter_results=[
                        DeleteAclsFilterResult(CLUSTER_DENIED, CLUSTER_DENIED_MESSAGE, [])
                        for _ in req.filters
                    ]
                )
            )
        return None

    # -- helpers ------------------------------------------------------------------------

    def _operations(self, slot: Slot, resource: ResourceType) -> Callable[[str], int]:
        """The authorized-operations bit field of a resource of this type, for the
        request's principal and host."""
        conn = slot.conn
        host = conn.client_host.removeprefix("/")
        return partial(self.authorizer.authorized_operations, conn.principal, host, resource)


def _offset_fetch_groups(slot: Slot, req: OffsetFetchRequest, can: Can) -> Served | None:
    """OffsetFetch v8+: Describe on each group (30 in its entry), then Describe on each
    topic (29 on each partition asked of the others; an all-offsets fetch leaves them
    out)."""
    groups = req.groups
    denied_groups = {
        i: OffsetFetchResponseGroup(group_id=g.group_id, topics=[], error_code=GROUP_DENIED)
        for i, g in enumerate(groups)
        if not can(DESCRIBE, GROUP, g.group_id)
    }
    # Per group asked: the names of its topics and the entries of those denied, or None
    # for an all-offsets fetch (its answer is filtered instead).
    topics_of: list[tuple[list[str], dict[int, OffsetFetchResponseTopics]] | None] = []
    allowed = []
    for i, g in enumerate(groups):
        if g.topics is None:
            topics_of.append(None)
            if i not in denied_groups:
                allowed.append(g)
            continue
        denied = {
            j: OffsetFetchResponseTopics(
                t.name,
                [
                    OffsetFetchResponsePartitions(p, NO_OFFSET, -1, "", TOPIC_DENIED)
                    for p in t.partition_indexes
                ],
            )
            for j, t in enumerate(g.topics)
            if not can(DESCRIBE, TOPIC, t.name)
        }
        topics_of.append(([t.name for t in g.topics], denied))
        if i not in denied_groups:
            kept = [t for j, t in enumerate(g.topics) if j not in denied]
            allowed.append(replace(g, topics=kept) if denied else g)

    if not denied_groups and all(a is not None and not a[1] for a in topics_of):
        return req

    def fix(i: int, group: OffsetFetchResponseGroup) -> OffsetFetchResponseGroup:
        asked = topics_of[i]
        if group.error_code:
            return group
        if asked is None:
            return replace(group, topics=[t for t in group.topics if can(DESCRIBE, TOPIC, t.name)])
        names, denied = asked
        if not denied:
            return group
        return replace(group, topics=_in_request_order(names, denied, group.topics, _name))

    def merge(resp: Any) -> Any:
        if not isinstance(resp, OffsetFetchResponse):
            return resp
        ids = [g.group_id for g in groups]
        return replace(
            resp, groups=_in_request_order(ids, denied_groups, resp.groups, _group_id, fix)
        )

    return _narrowed(
        slot,
        merge,
        allowed,
        lambda kept: replace(req, groups=kept),
        OffsetFetchResponse(groups=[]),
    )


def _narrowed(
    slot: Slot,
    merge: Callable[[Any], Any],
    allowed: list[T],
    narrow: Callable[[list[T]], Served],
    empty: Any,
) -> Served | None:
    """Pass on the request narrowed to `allowed` with `merge` to put back what was taken
    out; with nothing allowed, answer at once (`empty`, merged: every entry refused)."""
    slot.reply_filter = merge
    if not allowed:
        slot.answer(empty)
        return None
    return narrow(allowed)


def _in_request_order(
    names: Sequence[Hashable],
    denied: dict[int, T],
    answered: list[T],
    name_of: Callable[[T], Hashable],
    fix: Callable[[int, T], T] | None = None,
) -> list[T]:
    """The entries of an answer, in the order of the request's: entry i is `denied[i]` if
    it was refused, else the next answered entry of the same name (passed through `fix`,
    when given, with i). Answered entries the request did not name follow, as they came."""
    queues: dict[Hashable, deque[T]] = {}
    for entry in answered:
        queues.setdefault(name_of(entry), deque()).append(entry)
    out: list[T] = []
    for i, name in enumerate(names):
        if i in denied:
            out.append(denied[i])
            continue
        queue = queues.get(name)
        if queue:
            entry = queue.popleft()
            out.append(entry if fix is None else fix(i, entry))
    for queue in queues.values():
        out.extend(queue)
    return out


def _describable_offsets(can: Can, resp: Any) -> Any:
    """An all-offsets OffsetFetch answer (before v8) without the topics the principal may
    not describe."""
    if not isinstance(resp, OffsetFetchResponse):
        return resp
    return replace(resp, topics=[t for t in resp.topics if can(DESCRIBE, TOPIC, t.name)])


def _metadata_of(
    broker: Broker, names: list[str], version: int, allow_creation: bool = False
) -> MetadataResponse:
    """The broker's Metadata answer for these topics alone (none: the brokers and the
    cluster, no topics). Version 0 reads an empty list as every topic, so an answer with
    none is asked at version 1: the fields are the same, only the encoding differs."""
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=n) for n in names],
        allow_auto_topic_creation=allow_creation,
    )
    return broker.metadata(request, version if names or version else 1)


def _key(c: Coordinator) -> str:
    return c.key


def _group_id(entry: Any) -> str:
    return entry.group_id  # type: ignore[no-any-return]


def _name(entry: Any) -> str:
    return entry.name  # type: ignore[no-any-return]


def _topic(entry: FetchableTopicResponse) -> str:
    return entry.topic
