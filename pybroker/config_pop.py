# BrokerConfig's 5.x POP keys (broker/pop/): part of the one schema, declared in their own file.
"""The POP settings of :class:`pybroker.config.BrokerConfig` (Java 5.3.3 BrokerConfig's names and
defaults), a base class of it so that ``config.broker.revive_queue_num`` reads as any other
broker setting. docs/architecture/pop.md says what each one governs; the check-point buffer
keys are accepted and listed as not acted on (config_not_acted_on.py)."""
import dataclasses

from pybroker.schema import at_least, between, matches, setting

__all__ = ["PopSettings"]


@dataclasses.dataclass(frozen=True)
class PopSettings:
    """5.x POP consumption: revive, long polling, retry topics, order POP, the shared table."""
    revive_queue_num: int = setting("reviveQueueNum", 8,
        "queues of rmq_sys_REVIVE_LOG_<cluster>: POP check-points and acks", unit="count",
        rule=between(1, 512), important=True)
    revive_interval: int = setting("reviveInterval", 1000,
        "pause between two revive rounds", unit="ms", long=True, rule=between(10, 600000))
    revive_max_slow: int = setting("reviveMaxSlow", 3,
        "an idle revive queue waits up to this many intervals", unit="count", long=True,
        rule=between(1, 1000))
    revive_scan_time: int = setting("reviveScanTime", 10000,
        "longest scan of one revive queue per round", unit="ms", long=True,
        rule=between(100, 3600000))
    enable_skip_long_awaiting_ack: bool = setting("enableSkipLongAwaitingAck", False,
        "an ack whose check-point is not found within reviveAckWaitMs stops holding the "
        "revive offset")
    revive_ack_wait_ms: int = setting("reviveAckWaitMs", 180000,
        "see enableSkipLongAwaitingAck", unit="ms", long=True, rule=at_least(0))
    enable_pop_log: bool = setting("enablePopLog", False, "log every POP step at INFO")
    enable_pop_buffer_merge: bool = setting("enablePopBufferMerge", False,
        "keep check-points in memory and merge acks into them before writing")
    pop_ck_stay_buffer_time: int = setting("popCkStayBufferTime", 10000,
        "enablePopBufferMerge: longest stay of a check-point in memory", unit="ms",
        rule=at_least(0))
    pop_ck_stay_buffer_time_out: int = setting("popCkStayBufferTimeOut", 3000,
        "enablePopBufferMerge: written this long before its revive time", unit="ms",
        rule=at_least(0))
    pop_ck_max_buffer_size: int = setting("popCkMaxBufferSize", 200000,
        "enablePopBufferMerge: check-points kept in memory", unit="count", rule=at_least(0))
    pop_ck_offset_max_queue_size: int = setting("popCkOffsetMaxQueueSize", 20000,
        "enablePopBufferMerge: offsets waiting per queue", unit="count", rule=at_least(0))
    enable_pop_batch_ack: bool = setting("enablePopBatchAck", False,
        "enablePopBufferMerge: write merged acks as batch acks")
    append_ack_async: bool = setting("appendAckAsync", False,
        "answer an ack before its record is written")
    append_ck_async: bool = setting("appendCkAsync", False,
        "answer a POP before its check-point is written")
    pop_polling_size: int = setting("popPollingSize", 1024,
        "POPs held for one topic@group@queue", unit="count", rule=between(0, 1 << 20))
    pop_polling_map_size: int = setting("popPollingMapSize", 100000,
        "topic@group@queue keys with held POPs", unit="count", rule=between(1, 1 << 24))
    max_pop_polling_size: int = setting("maxPopPollingSize", 100000,
        "POPs held per broker process", unit="count", long=True, rule=between(0, 1 << 24))
    pop_long_polling_force_notify_interval: int = setting("popLongPollingForceNotifyInterval",
        800, "every this many queue offsets an arrival wakes a held POP whatever its filter",
        long=True, rule=at_least(0))
    enable_notify_after_pop_order_lock_release: bool = setting(
        "enableNotifyAfterPopOrderLockRelease", True,
        "wake held order POPs when a queue's head stops being held")
    init_pop_offset_by_check_msg_in_mem: bool = setting("initPopOffsetByCheckMsgInMem", True,
        "a queue never popped starts at its first message when all of it is in memory")
    retrieve_message_from_pop_retry_topic_v1: bool = setting(
        "retrieveMessageFromPopRetryTopicV1", True,
        "with enableRetryTopicV2, still pop the V1 retry topic")
    enable_retry_topic_v2: bool = setting("enableRetryTopicV2", False,
        "POP retry topics are %RETRY%group+topic instead of %RETRY%group_topic")
    pop_from_retry_probability: int = setting("popFromRetryProbability", 20,
        "percent of POPs that read the retry topic first", unit="percent", rule=between(0, 100))
    pop_inflight_message_threshold: int = setting("popInflightMessageThreshold", 10000,
        "enablePopMessageThreshold: in-flight messages above which a queue is not popped",
        unit="count", long=True, rule=at_least(0))
    enable_pop_message_threshold: bool = setting("enablePopMessageThreshold", False,
        "stop popping a queue with too many in-flight messages")
    pop_response_return_actual_retry_topic: bool = setting(
        "popResponseReturnActualRetryTopic", False,
        "popped retry messages keep their retry topic instead of the topic popped")
    skip_when_ck_re_put_reach_max_times: bool = setting("skipWhenCKRePutReachMaxTimes", False,
        "drop a check-point whose revive failed 17 times")
    pop_slots_max: int = setting("popSlotsMax", 65536,
        "topic@group@queue entries of the shared POP state (run/pop)", unit="count",
        rule=between(64, 1 << 22), pybroker_only=True)
    # --- QUERY_ASSIGNMENT (400): the broker's rebalance (broker/pop/assignment.py) -------------
    server_load_balancer_enable: bool = setting("serverLoadBalancerEnable", True,
        "QUERY_ASSIGNMENT splits a topic's queues among the group's clients; false: every "
        "client gets every queue")
    default_message_request_mode: str = setting("defaultMessageRequestMode", "PULL",
        "mode QUERY_ASSIGNMENT answers for a group and topic without one set",
        rule=matches(r"PULL|POP", "PULL or POP"))
    default_pop_share_queue_num: int = setting("defaultPopShareQueueNum", -1,
        "POP mode: how many following clients' queues a client also pops; -1 or <= 0: "
        "every queue", unit="count")
    load_balance_poll_name_server_interval: int = setting(
        "loadBalancePollNameServerInterval", 30000,
        "QUERY_ASSIGNMENT asks the NameServer for a topic's queues again after this long",
        unit="ms", long=True, rule=between(1000, 86400000))
