# `pybroker admin exportMetadata`: a cluster's topics and groups in one file (mqadmin's form).
"""exportMetadata: the application topics and subscription groups of a broker or of every
master of a cluster, written as mqadmin writes them (metadata.json, or topic.json /
subscriptionGroup.json with -t / -g), for moving metadata between clusters or keeping a copy.

What is left out is what mqadmin leaves out: system topics (the broker's own list,
GET_SYSTEM_TOPIC_LIST_FROM_BROKER, and TopicValidator's), retry and DLQ topics unless -s, and
system or predefined groups. Over a cluster, a topic's queue counts (and a group's retry
queues) are added up across masters, as Java adds them."""
import json
import os
import time

from pybroker.admin.broker_commands import Command, invoke, masters
from pybroker.protocol import fastjson
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, Perm,
                                         is_system_group, is_system_topic)

__all__ = ["COMMANDS", "user_topic_config", "user_subscription_groups"]

DEFAULT_FILE_PATH = "/tmp/rocketmq/export"      # mqadmin's default -f


async def user_topic_config(admin, address: str, special_topic: bool) -> dict:
    """GET_ALL_TOPIC_CONFIG's document without system topics (and without retry and DLQ
    topics unless ``special_topic``) or topics of an invalid permission (Java's
    getUserTopicConfig)."""
    response = await invoke(admin, address, RequestCode.GET_ALL_TOPIC_CONFIG)
    document = fastjson.loads(response.body or b"{}")
    listed = await invoke(admin, address, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
    system = set(fastjson.loads(listed.body or b"{}").get("topicList", []))
    table = document.get("topicConfigTable", {})
    for name in list(table):
        perm = table[name].get("perm", 0)
        if name in system or is_system_topic(name) or not 0 <= perm < Perm.PRIORITY or \
                (not special_topic and name.startswith((RETRY_GROUP_TOPIC_PREFIX,
                                                        DLQ_GROUP_TOPIC_PREFIX))):
            del table[name]
    return document


async def user_subscription_groups(admin, address: str) -> dict:
    """GET_ALL_SUBSCRIPTIONGROUP_CONFIG's document without system and predefined groups."""
    response = await invoke(admin, address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    document = fastjson.loads(response.body or b"{}")
    table = document.get("subscriptionGroupTable", {})
    for name in list(table):
        if is_system_group(name):
            del table[name]
    return document


def _write(path: str, document) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(document, indent="\t", sort_keys=True) + "\n")


async def export_metadata(admin, args, out) -> int:
    if not args.broker_addr and not args.cluster:
        out.progress("pybroker admin exportMetadata: give -c clusterName or -b brokerAddr")
        return 2
    if args.broker_addr and (args.topic_only or args.groups_only):
        # mqadmin's -b form: one broker's document as the broker answers it.
        if args.topic_only:
            path = os.path.join(args.file_path, "topic.json")
            document = await user_topic_config(admin, args.broker_addr, args.special_topic)
        else:
            path = os.path.join(args.file_path, "subscriptionGroup.json")
            document = await user_subscription_groups(admin, args.broker_addr)
        _write(path, document)
        out.line(f"export {path} success")
        return 0
    topics: dict[str, dict] = {}
    groups: dict[str, dict] = {}
    for _, address in await masters(admin, args):
        _merge_topics(topics, await user_topic_config(admin, address, args.special_topic))
        _merge_groups(groups, await user_subscription_groups(admin, address))
    result: dict = {}
    if args.topic_only:
        result["topicConfigTable"], name = topics, "topic.json"
    elif args.groups_only:
        result["subscriptionGroupTable"], name = groups, "subscriptionGroup.json"
    else:
        result.update(topicConfigTable=topics, subscriptionGroupTable=groups)
        name = "metadata.json"
    result["exportTime"] = time.time_ns() // 1_000_000
    path = os.path.join(args.file_path, name)
    _write(path, result)
    out.line(f"export {path} success")
    return 0


def _merge_topics(topics: dict, document: dict) -> None:
    for name, config in document.get("topicConfigTable", {}).items():
        seen = topics.get(name)
        if seen is not None:
            config["writeQueueNums"] += seen["writeQueueNums"]
            config["readQueueNums"] += seen["readQueueNums"]
        topics[name] = config


def _merge_groups(groups: dict, document: dict) -> None:
    for name, config in document.get("subscriptionGroupTable", {}).items():
        seen = groups.get(name)
        if seen is not None:
            config["retryQueueNums"] += seen["retryQueueNums"]
        groups[name] = config


COMMANDS: dict[str, Command] = {
    "exportMetadata": (export_metadata, "write the application topics and groups to a file", (
        ("-c", "cluster", {"help": "every master of this cluster"}),
        ("-b", "broker_addr", {"help": "one broker ip:port"}),
        ("-f", "file_path", {"default": DEFAULT_FILE_PATH, "help": "directory of the file"}),
        ("-t", "topic_only", {"action": "store_true", "help": "only topics (topic.json)"}),
        ("-g", "groups_only", {"action": "store_true",
                               "help": "only groups (subscriptionGroup.json)"}),
        ("-s", "special_topic", {"action": "store_true",
                                 "help": "keep retry and DLQ topics"}))),
}
