# Compat: what Apache's rocketmq-proxy 5.3.3 in CLUSTER mode asks of NameServer and broker.
"""Goal: the remoting requests rocketmq-proxy 5.3.3 (CLUSTER mode, from Maven Central) sends a
NameServer and a broker when it starts and while it idles are answered by pybroker as by the
Java 5.3.3 broker, and the proxy runs as users run it (tools/rocketmq_proxy.py).

Method: the same proxy (tools/rocketmq_proxy.py, small heap, free ports) starts in front of
pybroker standalone and in front of Java 5.3.3's NameServer and broker; tools/capture_proxy.py
relays between the proxy and each of them record every frame. The same assertions hold on
both: at start the proxy asks the route of its system topic DefaultHeartBeatSyncerTopic (not
there yet: TOPIC_NOT_EXIST), creates it on the broker (UPDATE_AND_CREATE_TOPIC), registers its
broadcasting system consumer and producer (HEART_BEAT, answered with the 5.x heartbeat fields),
reads the queue's max offset and long-polls it: the pulls are held, never answered at once
(SUBSCRIPTION_NOT_LATEST was pybroker's answer before broadcasting groups stopped being
notified), and no NOTIFY_CONSUMER_IDS_CHANGED reaches the proxy. Missing Java skips (fails under
PYBROKER_REQUIRE_PEERS=1).
"""
import time

import pytest

from pybroker.protocol.codes import RequestCode, ResponseCode
from tests import peers, proxy_support
from tests.ha_support import wait_for

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(300)]

SYNCER_TOPIC = "DefaultHeartBeatSyncerTopic"
SYNCER_GROUP = "CID_DefaultHeartBeatSyncerTopic"


@pytest.fixture(scope="module", params=proxy_support.BACKENDS)
def deployment(request, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"proxy-{request.param}")
    with proxy_support.deployment(request.param, work, peers) as running:
        yield running


def _idle_exchanges(deployment) -> list:
    """The broker capture once the system consumer has pulled and a second has passed."""
    wait_for(lambda: proxy_support.of_code(deployment.broker_exchanges(),
                                           RequestCode.PULL_MESSAGE),
             60, "the proxy's first pull of its system topic")
    time.sleep(1.0)
    return deployment.broker_exchanges()


def test_start_creates_the_system_topic(deployment):
    routes = proxy_support.of_code(deployment.namesrv_exchanges(),
                                   RequestCode.GET_ROUTEINFO_BY_TOPIC)
    syncer = [e for e in routes if e.request.ext_fields.get("topic") == SYNCER_TOPIC]
    assert [e.response.code for e in syncer[:2]] == [ResponseCode.TOPIC_NOT_EXIST,
                                                    ResponseCode.SUCCESS], deployment.backend
    (create,) = proxy_support.of_code(deployment.broker_exchanges(),
                                      RequestCode.UPDATE_AND_CREATE_TOPIC)
    fields = create.request.ext_fields
    assert (fields["topic"], fields["readQueueNums"], fields["writeQueueNums"],
            fields["perm"]) == (SYNCER_TOPIC, "1", "1", "6")
    assert create.response.code == ResponseCode.SUCCESS
    assert b'"perm":6' in syncer[1].response.body and b'"readQueueNums":1' in \
        syncer[1].response.body


def test_system_consumer_registers_and_long_polls(deployment):
    found = _idle_exchanges(deployment)
    heartbeats = proxy_support.of_code(found, RequestCode.HEART_BEAT)
    assert heartbeats and all(e.response.code == ResponseCode.SUCCESS for e in heartbeats)
    assert {key: heartbeats[0].response.ext_fields[key] for key in
            ("IS_SUPPORT_HEART_BEAT_V2", "IS_SUB_CHANGE")} == \
        {"IS_SUPPORT_HEART_BEAT_V2": "true", "IS_SUB_CHANGE": "true"}
    assert b'"messageModel":"BROADCASTING"' in heartbeats[0].request.body
    (max_offset,) = proxy_support.of_code(found, RequestCode.GET_MAX_OFFSET)
    assert (max_offset.request.ext_fields["topic"], max_offset.response.code,
            max_offset.response.ext_fields["offset"]) == (SYNCER_TOPIC, ResponseCode.SUCCESS,
                                                          "0")
    pulls = proxy_support.of_code(found, RequestCode.PULL_MESSAGE)
    assert {e.request.ext_fields["consumerGroup"] for e in pulls} == {SYNCER_GROUP}
    # Held: the long poll (suspendTimeoutMillis 15000) is still open or ended with no message.
    assert {e.response.code for e in pulls if e.response is not None} <= \
        {ResponseCode.PULL_NOT_FOUND}, [(e.response.code, e.response.remark) for e in pulls
                                        if e.response is not None]
    assert len(pulls) <= 2, f"{len(pulls)} pulls in a few seconds: answered at once"
    assert not proxy_support.of_code(found, RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                     from_proxy=False)
