# `pybroker admin` commands about one topic's permission and clusters (mqadmin's letters).
"""updateTopicPerm, topicClusterList."""
from pybroker.admin.broker_commands import MASTER_ID, Command, invoke, masters
from pybroker.protocol import headers
from pybroker.protocol.codes import RequestCode
from pybroker.protocol.constants import Perm

__all__ = ["COMMANDS", "perm_text", "topic_config_text"]


def perm_text(perm: int) -> str:
    """Java's PermName.perm2String: ``RWX`` with ``-`` for each bit not set."""
    return "".join(letter if perm & bit else "-" for letter, bit in
                   (("R", Perm.READ), ("W", Perm.WRITE), ("X", Perm.INHERIT)))


def topic_config_text(topic: str, read: int, write: int, perm: int, sys_flag: int = 0,
                      order: bool = False) -> str:
    """Java 4.9.8's TopicConfig.toString (5.x adds ``, attributes={...}``)."""
    return (f"TopicConfig [topicName={topic}, readQueueNums={read}, writeQueueNums={write}, "
            f"perm={perm_text(perm)}, topicFilterType=SINGLE_TAG, topicSysFlag={sys_flag}, "
            f"order={str(order).lower()}]")


async def update_topic_perm(admin, args, out) -> int:
    if args.perm not in (2, 4, 6):
        out.progress(f"pybroker admin updateTopicPerm: -p {args.perm}: the permission is 2 "
                     "(write), 4 (read) or 6 (read and write)")
        return 2
    route = await admin.topic_route(args.topic)
    if route is None or not route.queue_datas:
        out.progress(f"pybroker admin updateTopicPerm: topic {args.topic} has no route")
        return 1
    first = route.queue_datas[0]
    fields = headers.encode_header(headers.CREATE_TOPIC_REQUEST, {
        "topic": args.topic, "default_topic": "TBW102", "read_queue_nums": first.read_queue_nums,
        "write_queue_nums": first.write_queue_nums, "perm": args.perm,
        "topic_filter_type": "SINGLE_TAG", "topic_sys_flag": first.topic_sys_flag,
        "order": False})
    if args.broker_addr:
        targets = _broker_target(route, args.broker_addr)
        if targets is None:
            out.line("updateTopicPerm error broker not exit or broker is not master!.")
            return 1
    elif args.cluster:
        targets = [(address, first.perm) for _, address in await masters(admin, args)]
    else:
        out.progress("pybroker admin updateTopicPerm: give -b brokerAddr or -c clusterName")
        return 2
    changes = []
    for address, old_perm in targets:
        if args.broker_addr and old_perm == args.perm:
            out.line("new perm equals to the old one!")
            return 0
        await invoke(admin, address, RequestCode.UPDATE_AND_CREATE_TOPIC, dict(fields))
        out.line(f"update topic perm from {old_perm} to {args.perm} in {address} success.")
        changes.append({"brokerAddr": address, "oldPerm": old_perm, "perm": args.perm})
    if args.broker_addr:
        out.line(topic_config_text(args.topic, first.read_queue_nums, first.write_queue_nums,
                                   args.perm, first.topic_sys_flag) + ".")
    if out.json:
        out.document(changes)
    return 0


def _broker_target(route, address: str) -> list[tuple[str, int]] | None:
    """[(address, its current perm)] when ``address`` is a master of the route, else None."""
    for broker in route.broker_datas:
        if broker.broker_addrs.get(MASTER_ID) == address:
            perms = [queue.perm for queue in route.queue_datas
                     if queue.broker_name == broker.broker_name]
            return [(address, perms[0] if perms else 0)]
    return None


async def topic_cluster_list(admin, args, out) -> int:
    route = await admin.topic_route(args.topic)
    if route is None or not route.broker_datas:
        out.progress(f"pybroker admin topicClusterList: topic {args.topic} has no route")
        return 1
    name = route.broker_datas[0].broker_name
    info = await admin.cluster_info()
    clusters = sorted(cluster for cluster, names in info.cluster_addr_table.items()
                      if name in names)
    if out.json:
        out.document(clusters)
    for cluster in clusters:
        out.line(cluster)
    return 0


COMMANDS: dict[str, Command] = {
    "updateTopicPerm": (update_topic_perm, "change a topic's permission on a broker or cluster", (
        ("-t", "topic", {"required": True}),
        ("-p", "perm", {"required": True, "type": int,
                        "help": "2 write, 4 read, 6 read and write"}),
        ("-b", "broker_addr", {"help": "a master's address ip:port"}),
        ("-c", "cluster", {"help": "every master of this cluster"}))),
    "topicClusterList": (topic_cluster_list, "the clusters a topic is served in", (
        ("-t", "topic", {"required": True}),)),
}
