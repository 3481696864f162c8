# Which process answers which request code: the one routing table of the broker.
"""Request routing of the multi-process broker (docs/architecture/metadata.md).

DATA codes are answered by the remoting worker that received them (they touch the store and the
send ring). METADATA codes are forwarded to the metadata service in the supervisor, the single
writer of topics, groups, offsets, the client registry and locks. Anything else is answered
REQUEST_CODE_NOT_SUPPORTED by the transport.
"""
from pybroker.protocol.codes import RequestCode

DATA_CODES = frozenset({
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.QUERY_MESSAGE,
    RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION,
    RequestCode.CHECK_CLIENT_CONFIG,
    # 5.x POP (broker/pop/): served from the mappings and the shared POP state.
    RequestCode.POP_MESSAGE, RequestCode.ACK_MESSAGE, RequestCode.BATCH_ACK_MESSAGE,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME, RequestCode.PEEK_MESSAGE,
    RequestCode.NOTIFICATION, RequestCode.POLLING_INFO,
    # 5.x timer (issue #23, broker/timer_requests.py): files of the timer worker, a put.
    RequestCode.GET_TIMER_CHECK_POINT, RequestCode.GET_TIMER_METRICS, RequestCode.RECALL_MESSAGE,
})

METADATA_CODES = frozenset({
    RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
    RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
    RequestCode.UPDATE_AND_CREATE_TOPIC, RequestCode.DELETE_TOPIC_IN_BROKER,
    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.GET_TOPIC_STATS_INFO,
    RequestCode.GET_CONSUME_STATS, RequestCode.GET_CONSUMER_CONNECTION_LIST,
    RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RequestCode.DELETE_SUBSCRIPTIONGROUP,
    RequestCode.GET_ALL_CONSUMER_OFFSET, RequestCode.GET_ALL_DELAY_OFFSET,
    RequestCode.GET_BROKER_CONFIG, RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.GET_CONSUMER_RUNNING_INFO,
    RequestCode.CONSUME_MESSAGE_DIRECTLY, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
    RequestCode.GET_PRODUCER_CONNECTION_LIST, RequestCode.VIEW_BROKER_STATS_DATA,
    # Whole-broker views and an admin's cleanup (admin/broker_overview.py, admin/ha_status.py,
    # admin/store_maintenance.py).
    RequestCode.GET_BROKER_CONSUME_STATS, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER,
    RequestCode.GET_BROKER_HA_STATUS, RequestCode.DELETE_EXPIRED_COMMITLOG,
    RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE,
    # Request-reply: the producer registry finds the requester (broker/reply.py).
    RequestCode.SEND_REPLY_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2,
    # 5.x broker-side rebalance: the group's members and the NameServer's routes.
    RequestCode.QUERY_ASSIGNMENT,
    # Controller mode: the supervisor holds the role (broker/controller_role.py).
    RequestCode.NOTIFY_BROKER_ROLE_CHANGED, RequestCode.GET_BROKER_EPOCH_CACHE,
    # RocketMQ 5.x protocol basics: topic/group config queries, message request modes.
    RequestCode.GET_TOPIC_CONFIG, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG,
    RequestCode.SET_MESSAGE_REQUEST_MODE, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE,
})

assert not DATA_CODES & METADATA_CODES, "a code is answered in exactly one place"
