"""Consumer groups against clients that behave as real ones do, in virtual time.

Hypothesis drives members of the consumer group protocol: they join, heartbeat (telling
what they own when it changed, or always), lose answers (and send the full heartbeat again
at once, as Kafka's client does when its connection drops), leave, fall silent past their
rebalance timeout or session, change subscriptions, and topics are created. A client
consumes exactly what the last answer it read gave it. After every step:
- no partition is consumed by two clients at once, and the coordinator's partition epochs
  match what its members hold;
- member epochs and the group epoch never go back;
- replaying every record written rebuilds the same groups;
- whenever the member table answers a heartbeat alone (the server's fast path), the full
  path answers it the same way and writes nothing.
At the end, with nothing changing, every client heartbeats until the group is Stable, and
every partition of every subscribed topic is then consumed by exactly one client, and the
table answers every client's heartbeat alone. A client
that missed two epochs in a row is fenced, and rejoins once its old session is over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fastcoord.core.consumer.group import ConsumerGroupState
from fastcoord.protocol.errors import ErrorCode
from fastcoord.protocol.messages import ConsumerGroupHeartbeatRequest
from tests.core.consumer.harness import ConsumerHarness, Owned, assigned, partitions

NAMES = ["a", "b", "c", "d"]
TOPICS = {"t": 5, "u": 3}
SESSION_MS = 45_000
REBALANCE_MS = 30_000  # the clients' RebalanceTimeoutMs
# What tells a client it is no longer in the group: its member was fenced, or the group
# itself was deleted (an Empty group without offsets goes at the next retention check).
LOST = (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND)


@dataclass
class Client:
    member_id: str
    topics: list[str]
    epoch: int = 0
    owned: Owned = field(default_factory=dict)
    joined: bool = False
    needs_full: bool = False  # an answer was lost: the next heartbeat says everything
    heard_ms: int = 0  # when the coordinator last answered it
    reported: Owned | None = None  # what its last heartbeat said it owns


class ConsumerGroupMachine(RuleBasedStateMachine):
    batched = False  # target assignments computed once per batch (the server's way)

    def __init__(self) -> None:
        super().__init__()
        self.h = ConsumerHarness(dict(TOPICS), batched=self.batched)
        self.clients: dict[str, Client] = {}
        self.epochs: dict[str, int] = {}  # member id -> highest epoch the coordinator held
        self.group_epoch = 0
        self.steps = 0

    # -- the client ---------------------------------------------------------------------

    def _send(self, client: Client, read_answer: bool = True, report: bool = False) -> None:
        """One heartbeat: a join while not in the group; everything after a lost answer or
        a new subscription; else its epoch, and what it owns when that changed since it last
        said (as Kafka's clients do) or when `report`."""
        joining = not client.joined
        full = joining or client.needs_full
        owned = None
        if not joining and (full or report or client.owned != client.reported):
            owned = partitions(client.owned)
            client.reported = dict(client.owned)
        request = ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=client.member_id,
            member_epoch=0 if joining else client.epoch,
            rebalance_timeout_ms=REBALANCE_MS if full else -1,
            subscribed_topic_names=list(client.topics) if full else None,
            topic_partitions=[] if joining else owned,
        )
        table_answered = False
        if not joining and not full and owned is None:
            table_answered = self._table_answers(client) == 0
        written = len(self.h.records)
        answer = self.h.request(request)
        if table_answered:
            # The table's answer is the full path's: NONE at the epoch, nothing new.
            assert answer.error_code == 0 and answer.member_epoch == client.epoch, answer
            assert answer.assignment is None and len(self.h.records) == written, answer
        self._read(client, answer, read_answer)

    def _read(self, client: Client, answer: Any, read_answer: bool = True) -> None:
        """The client takes its answer."""
        if answer.error_code in LOST:
            client.owned, client.joined, client.epoch = {}, False, 0  # lost: rejoin
            client.reported = None
            return
        assert answer.error_code == 0, answer
        if not read_answer:
            client.joined, client.needs_full = True, True
            return
        client.heard_ms = self.h.now
        client.joined, client.needs_full = True, False
        client.epoch = answer.member_epoch
        given = assigned(answer, self.h.topics)
        if given is not None:
            client.owned = given

    def _request(self, client: Client) -> ConsumerGroupHeartbeatRequest:
        """The client's next heartbeat, as _send makes it (telling what it owns)."""
        joining = not client.joined
        full = joining or client.needs_full
        owned = None if joining else partitions(client.owned)
        if not joining:
            client.reported = dict(client.owned)
        return ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=client.member_id,
            member_epoch=0 if joining else client.epoch,
            rebalance_timeout_ms=REBALANCE_MS if full else -1,
            subscribed_topic_names=list(client.topics) if full else None,
            topic_partitions=[] if joining else owned,
        )

    def _table_answers(self, client: Client) -> int:
        """What the server's fast path asks the member table for this heartbeat."""
        code: int = self.h.co.table.consumer_heartbeat_id(
            "g", client.member_id, client.epoch, "client", "/127.0.0.1", self.h.now
        )
        return code

    # -- rules --------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), topics=st.sampled_from([["t"], ["u"], ["t", "u"]]))
    def join(self, name: str, topics: list[str]) -> None:
        if name not in self.clients:
            self.clients[name] = Client(name, topics)
            self._send(self.clients[name])

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), report=st.booleans())
    def heartbeat(self, data: st.DataObject, report: bool) -> None:
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        self._send(client, report=report)

    @rule(
        names=st.lists(st.sampled_from(NAMES), min_size=1, max_size=4),
        topics=st.sampled_from([["t"], ["u"], ["t", "u"]]),
    )
    def together(self, names: list[str], topics: list[str]) -> None:
        """Clients, new ones joining among them, heartbeat at once: the server reads their
        requests together, and (batched) the assignment runs once for all of them."""
        clients = []
        for name in names:
            if name not in self.clients:
                self.clients[name] = Client(name, topics)
            clients.append(self.clients[name])
        handles = [self.h.send(self._request(client), 1) for client in clients]
        self.h.run_assignments()
        for client, handle in zip(clients, handles, strict=True):
            answer = self.h.answer(handle)
            assert answer is not None, client
            self._read(client, answer)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def lose_an_answer(self, data: st.DataObject) -> None:
        """The answer is lost (its connection closed, say): the client sends the full
        request again at once, at the epoch it knows, as Kafka's clients do."""
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        self._send(client, False)
        self._send(client)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        client = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        if client.joined:
            self.h.exit(client.member_id)
        client.owned = {}

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), topics=st.sampled_from([["t"], ["u"], ["t", "u"]]))
    def resubscribe(self, data: st.DataObject, topics: list[str]) -> None:
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        client.topics, client.needs_full = topics, True
        self._send(client)

    def _sleep(self, ms: int) -> None:
        """Time passes for the coordinator and every client alike. A client that has not
        run (heard from the coordinator) for its rebalance timeout gives its partitions up
        and leaves, as Kafka's consumer does when its poll interval expires: by then the
        coordinator may have fenced it and handed them on."""
        self.h.sleep(ms)
        for client in self.clients.values():
            if client.joined and self.h.now - client.heard_ms >= REBALANCE_MS:
                # It leaves the group (its member may be gone already) and will join anew.
                self.h.exit(client.member_id)
                client.owned, client.joined, client.epoch, client.reported = {}, False, 0, None

    @rule(ms=st.integers(1, 20_000))
    def sleep(self, ms: int) -> None:
        self._sleep(ms)

    @rule(ms=st.integers(SESSION_MS, SESSION_MS + 5_000))
    def everyone_falls_silent(self, ms: int) -> None:
        self._sleep(ms)

    @rule()
    def a_topic_is_created(self) -> None:
        name = f"new{self.h.topics.version()}"
        self.h.topics.add(name, 2)
        for client in self.clients.values():
            if "t" in client.topics:
                client.topics = [*client.topics, name]
                client.needs_full = True

    # -- invariants ---------------------------------------------------------------------

    @invariant()
    def no_partition_is_consumed_twice(self) -> None:
        seen: dict[tuple[str, int], str] = {}
        for client in self.clients.values():
            for topic, parts in client.owned.items():
                for p in parts:
                    assert (topic, p) not in seen, (topic, p, seen[(topic, p)], client)
                    seen[(topic, p)] = client.member_id

    @invariant()
    def the_coordinator_agrees_with_itself(self) -> None:
        group = self.h.consumer_group()
        if group is None:
            self.group_epoch, self.epochs = 0, {}  # deleted: a new group starts again
            return
        held = sum(
            len(ps)
            for m in group.members.values()
            for ps in (*m.current.assigned.values(), *m.current.pending_revocation.values())
        )
        assert held == len(group.partition_epochs)
        assert group.unreconciled == {
            m.member_id
            for m in group.members.values()
            if not m.current.is_reconciled_to(group.assignment_epoch)
        }
        assert group.group_epoch >= self.group_epoch
        self.group_epoch = group.group_epoch
        for member_id, member in group.members.items():
            if member.member_epoch >= 0:
                assert member.member_epoch >= self.epochs.get(member_id, 0)
                self.epochs[member_id] = member.member_epoch
        for member_id in list(self.epochs):
            if member_id not in group.members:
                del self.epochs[member_id]  # a member that rejoins starts again

    @invariant()
    def replay_rebuilds_the_groups(self) -> None:
        self.steps += 1
        if self.steps % 5 == 0:
            assert self.h.replayed().snapshot() == self.h.co.snapshot()

    def teardown(self) -> None:
        # Nothing changes any more: every client heartbeats, telling what it owns, every
        # 15 seconds until the group settles; then every subscribed partition has exactly
        # one consumer. A client fenced for an epoch it missed twice is let back in once
        # its old self's session has ended, as Kafka does: that takes some rounds.
        for _ in range(10):
            for _ in range(3):
                for client in list(self.clients.values()):
                    self._send(client, report=True)
                    self.no_partition_is_consumed_twice()
            self._sleep(15_000)
        group = self.h.consumer_group()
        if not self.clients or group is None:
            return
        assert group.state is ConsumerGroupState.STABLE, group.state
        wanted = {
            (t, p) for c in self.clients.values() for t in c.topics for p in range(TOPICS.get(t, 2))
        }
        owned = {(t, p) for c in self.clients.values() for t, ps in c.owned.items() for p in ps}
        assert owned == wanted
        for client in self.clients.values():
            assert self._table_answers(client) == 0, client
        assert self.h.replayed().snapshot() == self.h.co.snapshot()


ConsumerGroupMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
TestConsumerGroup = ConsumerGroupMachine.TestCase


class BatchedConsumerGroupMachine(ConsumerGroupMachine):
    """The same clients against a coordinator that computes target assignments once per
    batch, each request a batch of its own: what the server does when requests come one
    at a time."""

    batched = True


BatchedConsumerGroupMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None
)
TestBatchedConsumerGroup = BatchedConsumerGroupMachine.TestCase
