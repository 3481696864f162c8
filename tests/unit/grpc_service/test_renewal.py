"""The receipt-handle renewal's rules (grpc_service/renewal.py) as the Java 5.3.3 proxy's
DefaultReceiptHandleManager applies them: which kept messages a scan renews and for how long
(RenewStrategyPolicy's steps), what it lets go (retries spent, an invalid handle, a refusal,
past renewMaxTimeMillis with the group's retry delay), what it clears (a client gone from its
group), and that an ack during a renewal gets the renewal's handle; plus the groups' retry
delays (Customized and Exponential policies).

Method: a Renewals with recording callables in place of the broker (the end-to-end path with a
real broker and client is tests/broker/test_grpc_renewal.py); handles are real gRPC receipt
handles built with the protocol's own encoder, their times set relative to now.
"""
import asyncio
import dataclasses
import time

import pytest

from pybroker.config import GrpcConfig
from pybroker.grpc_service.consumer import decode_handle, grpc_handle
from pybroker.grpc_service.renewal import RENEW_STEPS_MS, Renewals
from pybroker.grpc_service.request_context import RequestContext
from pybroker.grpc_service.settings import retry_delay_ms
from pybroker.grpc_service.status import Code, GrpcRefused
from pybroker.protocol import pop
from pybroker.protocol.rocketmq_v2 import definition_pb2 as pb

CONFIG = GrpcConfig()          # renew ahead 10 s, 3 retries, 3 h, clear 1 s
RCTX = RequestContext("client-1", "JAVA", "5.0.8", "", "127.0.0.1:1", {})
GROUP, TOPIC = "g", "t"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _handle(offset: int, visible_in_ms: int, retrieved_ago_ms: int = 1000) -> str:
    pop_time = _now_ms() - retrieved_ago_ms
    invisible = retrieved_ago_ms + visible_in_ms
    return grpc_handle(pop.build_extra_info(offset, pop_time, invisible, 0, TOPIC, "b", 0,
                                            offset), 1000 + offset)


def _message(offset: int, handle: str, attempt: int = 1) -> pb.Message:
    return pb.Message(topic=pb.Resource(name=TOPIC), system_properties=pb.SystemProperties(
        message_id=f"m{offset}", receipt_handle=handle, delivery_attempt=attempt))


@dataclasses.dataclass
class _Broker:
    """What the renewals call, recorded; ``outcome(handle)`` decides each change's result."""
    online: bool = True
    outcome: object = None
    changes: list = dataclasses.field(default_factory=list)

    async def change(self, rctx, handle, group, topic, invisible_ms):
        self.changes.append((decode_handle(handle).offset, invisible_ms))
        outcome = self.outcome(handle) if self.outcome else None
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome == "refused":
            return None
        decoded = decode_handle(handle)
        return _handle(decoded.offset, invisible_ms, 0)

    async def is_online(self, rctx, group):
        return self.online


def _renewals(broker: _Broker, **config) -> Renewals:
    grpc_config = dataclasses.replace(CONFIG, **config)
    return Renewals(lambda: grpc_config, broker.change, broker.is_online,
                    lambda group, times: retry_delay_ms(None, times))


def _kept(renewals: Renewals) -> dict[int, str]:
    _, kept = renewals.groups.get(("client-1", GROUP), (None, {}))
    return {decode_handle(item.handle).offset: item.handle for item in kept.values()}


def test_a_scan_renews_what_becomes_visible_soon_with_the_policy_steps():
    async def scenario():
        broker = _Broker()
        renewals = _renewals(broker)
        renewals.add(RCTX, GROUP, TOPIC, _message(1, _handle(1, 5_000)))    # due (< 10 s)
        renewals.add(RCTX, GROUP, TOPIC, _message(2, _handle(2, 30_000)))   # not yet
        await renewals.scan()
        assert broker.changes == [(1, RENEW_STEPS_MS[0])]
        kept = _kept(renewals)
        assert decode_handle(kept[1]).invisible_time == RENEW_STEPS_MS[0]
        # The next renewals of a message take the next steps (the last one repeats).
        (key, item), = [(k, v) for k, v in renewals.groups[("client-1", GROUP)][1].items()
                        if decode_handle(v.handle).offset == 1]
        for step in RENEW_STEPS_MS[1:] + RENEW_STEPS_MS[-1:]:
            item.handle = _handle(1, 1_000)
            await renewals.scan()
            assert broker.changes[-1] == (1, step)
        assert all(offset == 1 for offset, _ in broker.changes)
    asyncio.run(scenario())


def test_failed_renewals_are_retried_then_let_go_and_refusals_let_go_at_once():
    async def scenario():
        broker = _Broker(outcome=lambda handle: OSError("link down")
                         if decode_handle(handle).offset == 1 else
                         GrpcRefused(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
                         if decode_handle(handle).offset == 2 else "refused")
        renewals = _renewals(broker)
        for offset in (1, 2, 3):
            renewals.add(RCTX, GROUP, TOPIC, _message(offset, _handle(offset, 1_000)))
        await renewals.scan()
        assert sorted(broker.changes) == [(1, 60_000), (2, 60_000), (3, 60_000)]
        assert list(_kept(renewals)) == [1]            # 2 invalid, 3 refused: let go
        for _ in range(CONFIG.max_renew_retry_times - 1):
            await renewals.scan()
        assert [c for c in broker.changes if c[0] == 1] == [(1, 60_000)] * 3
        await renewals.scan()                          # retries spent: let go, no change
        assert [c for c in broker.changes if c[0] == 1] == [(1, 60_000)] * 3
        assert _kept(renewals) == {}
    asyncio.run(scenario())


def test_past_the_renew_max_time_the_group_retry_delay_is_given_once():
    async def scenario():
        broker = _Broker()
        renewals = _renewals(broker, renew_max_time_millis=60_000)
        renewals.add(RCTX, GROUP, TOPIC, _message(1, _handle(1, 1_000, 61_000), attempt=3))
        await renewals.scan()
        # Reconsume count 2: the default customized policy's 5th step (index 2 + 2), 60 s.
        assert broker.changes == [(1, retry_delay_ms(None, 2))] == [(1, 60_000)]
        assert _kept(renewals) == {}
    asyncio.run(scenario())


def test_a_client_gone_from_its_group_gets_everything_back_soon():
    async def scenario():
        broker = _Broker(online=False)
        renewals = _renewals(broker)
        renewals.add(RCTX, GROUP, TOPIC, _message(1, _handle(1, 50_000)))
        renewals.add(RCTX, GROUP, TOPIC, _message(2, _handle(2, 1_000)))
        await renewals.scan()
        assert sorted(broker.changes) == [(1, 1000), (2, 1000)]
        assert renewals.groups == {}
        broker.changes.clear()
        renewals.add(RCTX, GROUP, TOPIC, _message(3, _handle(3, 50_000)))
        renewals.client_gone("client-1", GROUP)          # NotifyClientTermination
        await asyncio.sleep(0.05)
        assert broker.changes == [(3, 1000)] and renewals.kept_count() == 0
    asyncio.run(scenario())


def test_an_ack_during_a_renewal_gets_the_renewed_handle_and_ends_the_renewals():
    async def scenario():
        release = asyncio.Event()
        broker = _Broker()

        async def slow_change(rctx, handle, group, topic, invisible_ms):
            await release.wait()
            return await _Broker.change(broker, rctx, handle, group, topic, invisible_ms)
        grpc_config = CONFIG
        renewals = Renewals(lambda: grpc_config, slow_change, broker.is_online,
                            lambda group, times: 0)
        first = _handle(1, 1_000)
        renewals.add(RCTX, GROUP, TOPIC, _message(1, first))
        scan = asyncio.ensure_future(renewals.scan())
        await asyncio.sleep(0.01)
        take = asyncio.ensure_future(renewals.take(RCTX, GROUP, "m1", first))
        await asyncio.sleep(0.01)
        assert not take.done()                          # waits for the renewal
        release.set()
        await scan
        taken = await take
        assert taken != first and decode_handle(taken).invisible_time == RENEW_STEPS_MS[0]
        assert _kept(renewals) == {}
        assert await renewals.take(RCTX, GROUP, "m1", first) == first   # not kept any more
        assert await renewals.take(RCTX, GROUP, "m9", "not a handle") == "not a handle"
    asyncio.run(scenario())


@pytest.mark.parametrize("policy, times, expected", [
    ({}, 0, 10_000), ({}, 1, 30_000), ({}, -1, 10_000), ({}, 100, 7_200_000),
    ({"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1, 2, 3]}}, 0, 3),
    ({"type": "EXPONENTIAL"}, 0, 5_000), ({"type": "EXPONENTIAL"}, 3, 40_000),
    ({"type": "EXPONENTIAL"}, 40, 7_200_000),
    ({"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 1000, "max": 60_000,
                                                        "multiplier": 3}}, 2, 9_000),
])
def test_group_retry_delays_follow_javas_policies(policy, times, expected):
    group = type("Group", (), {"group_retry_policy": policy, "extra": {}})()
    assert retry_delay_ms(group, times) == expected
