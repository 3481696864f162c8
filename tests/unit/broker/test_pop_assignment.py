# QUERY_ASSIGNMENT (400): the broker-side rebalance of 5.x clients, as Java 5.3.3 answers it.
"""Goal: QUERY_ASSIGNMENT answers what Java 5.3.3's QueryAssignmentProcessor answers: the
topic's queues on every broker of the NameServer's route, split among the group's live clients
by the strategy the client names, each with the group's request mode (the one set, else the
broker's default); Java's allocate4Pop for a POP group (every broker's queue -1, or a client's
queues plus those of the clients after it); no answer where Java has none (no route, no member,
unknown strategy).

Method: a real NameServer (pybroker's NamesrvController on a free port in the test's loop) with
two brokers registered through the broker's own registration code (REGISTER_BROKER), the POP
harness's metadata with three clients of the group registered as heartbeats register them, the
handler called with the body the Java client sends; the POP allocation checked alone against
Java's rules worked by hand.
"""
import asyncio
import dataclasses
import importlib.util
import pathlib

import orjson
import pytest

from pybroker._testbase.cluster import free_port
from pybroker.broker.channel import Channel
from pybroker.broker.context import MetadataContext, StoreTopicDeleter
from pybroker.broker.managers.client_channel import make_channel_info
from pybroker.broker.pop import assignment
from pybroker.broker.registration import NamesrvRegistration
from pybroker.client.rebalance import allocate_average
from pybroker.client.route import sort_queues
from pybroker.config import load_broker_config, load_namesrv_config
from pybroker.namesrv.server import NamesrvController
from pybroker.protocol import bodies, constants, pop_bodies
from pybroker.protocol.bodies import MessageQueue
from pybroker.protocol.codes import RequestCode, ResponseCode
from pybroker.protocol.command import RemotingCommand
from pybroker.protocol.constants import ConsumeFromWhere, ConsumeType, MessageModel
from pybroker.store.config_docs import RequestMode, TopicConfig, TopicConfigDocument

_spec = importlib.util.spec_from_file_location(
    "pop_harness", pathlib.Path(__file__).with_name("pop_harness.py"))
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

TOPIC, GROUP = harness.TOPIC, harness.GROUP
CLIENTS = ("10.0.0.1@a", "10.0.0.2@b", "10.0.0.3@c")


def _queues(broker: str, count: int) -> list[MessageQueue]:
    return [MessageQueue(TOPIC, broker, queue_id) for queue_id in range(count)]


def test_allocate_for_pop_follows_java():
    queues = _queues("a", 4) + _queues("b", 2)
    clients = sorted(CLIENTS)
    # popShareQueueNum -1 (the default) or >= clients - 1: every broker's queue -1.
    for share in (-1, 0, 2, 5):
        assert assignment.allocate_for_pop(allocate_average, GROUP, clients[0], queues, clients,
                                           share) == [MessageQueue(TOPIC, "a", -1),
                                                      MessageQueue(TOPIC, "b", -1)]
    # share 1 of 3 clients: its own queues, then those of the next client (wrapping).
    own = allocate_average(GROUP, clients[2], queues, clients)
    following = allocate_average(GROUP, clients[0], queues, clients)
    assert assignment.allocate_for_pop(allocate_average, GROUP, clients[2], queues, clients,
                                       1) == own + following
    # More clients than queues: one queue each, by index.
    many = sorted(f"10.0.0.{i}@x" for i in range(5))
    assert assignment.allocate_for_pop(allocate_average, GROUP, many[4], queues[:3], many, 1) \
        == [queues[1]]
    assert assignment.allocate_for_pop(allocate_average, GROUP, "stranger", queues[:3], many,
                                       1) == []


async def _register(namesrv_addr: str, tmp_path, broker_name: str, queues: int,
                    topic: str = TOPIC) -> NamesrvRegistration:
    """A broker registered with the NameServer (for as long as its connection stays open)."""
    config = load_broker_config(None, {"brokerName": broker_name, "namesrvAddr": namesrv_addr,
                                       "listenPort": str(free_port()),
                                       "storePathRootDir": str(tmp_path / broker_name)})
    document = TopicConfigDocument({topic: TopicConfig(topic, queues, queues)})
    registration = NamesrvRegistration(config, lambda: document)
    assert await registration.register_all() == 1
    return registration


def _ask(ctx, client_id: str, strategy: str = "AVG", model: str = "CLUSTERING",
         topic: str = TOPIC):
    body = pop_bodies.encode_query_assignment_request(pop_bodies.QueryAssignmentRequest(
        topic, GROUP, client_id, strategy, model))
    request = RemotingCommand(RequestCode.QUERY_ASSIGNMENT, int(constants.LanguageCode.JAVA),
                              479, 1, 0, None, {}, body)
    return assignment.handle_query_assignment(ctx, None, request)


@pytest.fixture
def broker(tmp_path):
    broker = harness.PopBroker(tmp_path)
    yield broker
    broker.close()


def _context(broker, routes, **broker_settings) -> MetadataContext:
    config = dataclasses.replace(broker.config, broker=dataclasses.replace(
        broker.config.broker, **broker_settings))
    return MetadataContext(config, broker.store, broker.putter, broker.metadata,
                           broker.ctx.store_host, topic_deleter=StoreTopicDeleter(broker.store),
                           topic_routes=routes)


def _register_clients(broker) -> None:
    """The group's three members, as their heartbeats register them."""
    subscription = [bodies.build_subscription(TOPIC, "*", sub_version=1)]
    for index, client_id in enumerate(CLIENTS):
        channel = Channel(f"0:{index}", f"10.0.0.{index + 1}:4000", 0, 479)
        broker.metadata.consumers.register_consumer(
            GROUP, make_channel_info(channel, client_id, 0), ConsumeType.CONSUME_POP,
            MessageModel.CLUSTERING, ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, subscription)


async def _assigned(ctx, client_id: str, *args, **kwargs) -> list[tuple[MessageQueue, str]]:
    answer = await _ask(ctx, client_id, *args, **kwargs)
    return [(item.queue, item.mode)
            for item in pop_bodies.decode_query_assignment_response(answer.body)]


async def _check_pull_split(ctx, every: list[MessageQueue]) -> None:
    got = {client_id: await _assigned(ctx, client_id) for client_id in CLIENTS}
    assert {mode for pairs in got.values() for _, mode in pairs} == {"PULL"}
    # AVG over 6 queues and 3 sorted clients: two each, every queue once.
    assert sort_queues(queue for pairs in got.values() for queue, _ in pairs) == every
    assert [queue for queue, _ in got[CLIENTS[0]]] == every[:2]
    assert [queue for queue, _ in got[CLIENTS[2]]] == every[4:]
    assert [queue for queue, _ in await _assigned(ctx, CLIENTS[1], "AVG_BY_CIRCLE")] == \
        [every[1], every[4]]
    assert [queue for queue, _ in await _assigned(ctx, CLIENTS[1], model="BROADCASTING")] \
        == every
    # Java answers nothing for a strategy it does not have or a topic without route.
    assert orjson.loads((await _ask(ctx, CLIENTS[0], "CONSISTENT_HASH")).body) == {}
    assert orjson.loads((await _ask(ctx, CLIENTS[0], topic="Nowhere")).body) == {}
    assert (await _ask(ctx, CLIENTS[0], model="SIDEWAYS")).code == ResponseCode.SYSTEM_ERROR


def test_query_assignment_splits_every_broker_s_queues(broker, tmp_path):
    async def scenario():
        namesrv = NamesrvController(load_namesrv_config(None, {
            "listenPort": str(free_port()),
            "kvConfigPath": str(tmp_path / "kvConfig.json")}))
        address = await namesrv.start()
        routes = assignment.TopicRoutes(lambda: [address])
        registrations = []
        try:
            registrations += [await _register(address, tmp_path, "broker-a", 4),
                              await _register(address, tmp_path, "broker-b", 2)]
            ctx = _context(broker, routes)
            # No live member yet: no answer (the client keeps what it has).
            answer = await _ask(ctx, CLIENTS[0])
            assert answer.code == ResponseCode.SUCCESS and orjson.loads(answer.body) == {}
            _register_clients(broker)
            every = _queues("broker-a", 4) + _queues("broker-b", 2)
            await _check_pull_split(ctx, every)
            # defaultMessageRequestMode=POP: every broker's queue -1, mode POP, for each client.
            pop_ctx = _context(broker, routes, default_message_request_mode="POP")
            assert await _assigned(pop_ctx, CLIENTS[1]) == [
                (MessageQueue(TOPIC, "broker-a", -1), "POP"),
                (MessageQueue(TOPIC, "broker-b", -1), "POP")]
            # The mode set for the group (SET_MESSAGE_REQUEST_MODE) wins over the default:
            # POP sharing one following client's queues.
            broker.metadata.request_modes.set_mode(RequestMode(TOPIC, GROUP, "POP", 1))
            assert await _assigned(ctx, CLIENTS[2]) == [
                (queue, "POP") for queue in sort_queues(every[4:] + every[:2])]
            # A retry topic is always PULL.
            retry = f"%RETRY%{GROUP}"
            registrations.append(await _register(address, tmp_path, "broker-c", 1, retry))
            assert {mode for _, mode in await _assigned(pop_ctx, CLIENTS[0], topic=retry)} \
                == {"PULL"}
        finally:
            for registration in registrations:
                registration.close()
            routes.close_connections()
            await namesrv.stop()
    asyncio.run(scenario())
