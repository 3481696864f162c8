# A master's SyncStateSet in controller mode: what is confirmed, proposed, required (rules only).
"""The SyncStateSet rules of a controller-mode master (Java ``AutoSwitchHAService``).

The controller owns the SyncStateSet: the master proposes a change (``CONTROLLER_ALTER_SYNC_
STATE_SET``) and only the set the controller answers with (a higher set epoch) is
*confirmed*. While a proposal is pending, acknowledgements wait for the union of the confirmed
and the proposed set, as Java's ``getSyncStateSet`` does: a replica leaving the set is waited
for until the controller no longer counts it electable, a replica joining is waited for from
the moment it is proposed.

Shrink (Java ``maybeShrinkSyncStateSet``): a member whose connection is gone, or that has not
caught up for ``haMaxTimeSlaveNotCatchup``. Expand: a connected slave that is not an async
learner, caught up recently, at or past the start of the master's epoch, is first made
*required* (published, so sends wait for it too); the proposal goes to the controller once its
acknowledgement reaches the master's written end at the moment it became required
(``required_from``): every message SEND_OK'd without it is then on it. This closes the window
Java leaves between reading the master's end and waiting for the new member. A proposal the
controller refuses is withdrawn, and candidates are looked for against the confirmed set again,
as Java's ``maybeExpandInSyncStateSet`` looks at its local set: a slave refused once (Java's
controller says "don't alive" before its first heartbeat) is proposed again once caught up,
also after a reconnection.

Pure functions and a small value class; :mod:`pybroker.broker.replicas_manager` applies them
with the control block's slave lines (``ControlBlock.ha_slave_lines``).
"""
import dataclasses

from pybroker.store.control_block import HA_SLAVE_ASYNC_LEARNER

__all__ = ["SyncStateSet", "shrink", "expansion_candidates", "ready_to_join"]


@dataclasses.dataclass(frozen=True)
class SyncStateSet:
    """``confirmed`` members (controller ids, the master included) at ``epoch``, and the
    ``proposed`` set while an alteration is pending (None otherwise)."""
    confirmed: frozenset[int]
    epoch: int
    proposed: frozenset[int] | None = None

    @property
    def required(self) -> frozenset[int]:
        """Whom acknowledgements wait for (the master included)."""
        return self.confirmed | (self.proposed or frozenset())

    @property
    def in_sync_count(self) -> int:
        """Java's ``inSyncReplicasNums``: the larger of the two sets while one is pending."""
        if self.proposed is None:
            return len(self.confirmed)
        return max(len(self.confirmed), len(self.proposed))

    def propose(self, members) -> "SyncStateSet":
        return dataclasses.replace(self, proposed=frozenset(members))

    def withdraw(self) -> "SyncStateSet":
        """The proposal the controller did not take: the confirmed set stands."""
        return dataclasses.replace(self, proposed=None)

    def confirm(self, members, epoch: int) -> "SyncStateSet":
        """The controller's set at ``epoch``; an older or equal epoch changes nothing."""
        if epoch <= self.epoch:
            return self
        return SyncStateSet(frozenset(members), epoch, None)


def _connected(lines) -> dict[int, dict]:
    return {line["broker_id"]: line for line in lines if line["broker_id"]}


def shrink(members: frozenset[int], lines, now_ms: int, not_catchup_max_ms: int,
           self_id: int) -> frozenset[int]:
    """``members`` minus the slaves not connected or not caught up for too long."""
    connected = _connected(lines)
    kept = set()
    for member in members:
        line = connected.get(member)
        if member == self_id or (line is not None and line["caught_up_ms"]
                                 and now_ms - line["caught_up_ms"] <= not_catchup_max_ms):
            kept.add(member)
    return frozenset(kept)


def expansion_candidates(members: frozenset[int], lines, now_ms: int,
                         not_catchup_max_ms: int, epoch_start: int) -> frozenset[int]:
    """Connected slaves outside ``members`` that may join: not async learners, caught up
    within ``not_catchup_max_ms``, acknowledged at or past ``epoch_start``."""
    return frozenset(
        broker_id for broker_id, line in _connected(lines).items()
        if broker_id not in members and not line["flags"] & HA_SLAVE_ASYNC_LEARNER
        and line["caught_up_ms"] and now_ms - line["caught_up_ms"] <= not_catchup_max_ms
        and line["ack_offset"] >= epoch_start)


def ready_to_join(broker_id: int, lines) -> bool:
    """A required candidate has every message SEND_OK'd without it (see module docstring)."""
    line = _connected(lines).get(broker_id)
    # required_from is the written end + 1 (0 = not required yet).
    return line is not None and line["required_from"] > 0 \
        and line["ack_offset"] >= line["required_from"] - 1
