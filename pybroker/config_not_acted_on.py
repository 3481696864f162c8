# Settings honesty: broker.conf keys pybroker accepts and validates but does not act on.
"""The list `pybroker config` prints and start-up warns about (issue #13, item 5)."""

# Keys of the schema that load and validate but that pybroker does not act on (yet): listed by
# `pybroker config`, warned about when a broker.conf sets them. tests/unit/test_config_honesty.py
# fails when a schema key is read nowhere outside this module and is not listed here.
SETTINGS_NOT_ACTED_ON = {
    "flushCommitLogTimed": "the flusher sleeps on its eventfd with the interval as timeout",
    "registerBrokerTimeoutMills": "registration uses the client's own request timeout",
    "flushConsumerOffsetInterval": "consumer offsets are persisted every 5 s",
    "flushDelayOffsetInterval": "delay offsets are persisted with the schedule service",
    "enableCalcFilterBitMap": "no SQL92 filter bitmaps (docs/compatibility.md says why)",
    "compressedRegister": "registrations are sent uncompressed",
    "forceRegister": "registration is always sent",
    "serverWorkerThreads": "remoting workers are processes (remotingWorkers)",
    "serverSocketSndBufSize": "the kernel's socket buffer sizes are used",
    "serverSocketRcvBufSize": "the kernel's socket buffer sizes are used",
    "clientSocketSndBufSize": "the kernel's socket buffer sizes are used",
    "clientSocketRcvBufSize": "the kernel's socket buffer sizes are used",
    "enableAutoInSyncReplicas": "it belongs to slaveActingMaster mode, which pybroker lacks; "
                                "Java ignores it in controller mode too",
    # POP check-points are written before the POP answers, never buffered (apache/rocketmq
    # #3787: buffered check-points made slow consumers' acks late): no buffer to tune.
    "enablePopBufferMerge": "POP check-points are written at once, never buffered",
    "popCkStayBufferTime": "POP check-points are written at once, never buffered",
    "popCkStayBufferTimeOut": "POP check-points are written at once, never buffered",
    "popCkMaxBufferSize": "POP check-points are written at once, never buffered",
    "popCkOffsetMaxQueueSize": "POP check-points are written at once, never buffered",
    "enablePopBatchAck": "acks are never buffered, so never merged into batch acks",
    "appendAckAsync": "an ack is answered once its record is written",
    "appendCkAsync": "a POP is answered once its check-point is written",
    "enableSkipLongAwaitingAck": "an ack without a pending check-point never holds the revive "
                                 "offset (apache/rocketmq #5408), whatever this says",
    "reviveAckWaitMs": "an ack without a pending check-point never holds the revive offset",
    "popLongPollingForceNotifyInterval": "a held POP runs again on every arrival in its "
                                         "queues, whatever its filter",
    "timerWarmEnable": "no warm-up of the next timer slots (Java 5.3.3 never warms either: "
                       "its warm call is commented out)",
}


def not_acted_on_lines() -> list[str]:
    """``# key: reason`` lines for every setting pybroker accepts but does not act on."""
    return [f"# {key}: accepted, not acted on: {reason}"
            for key, reason in sorted(SETTINGS_NOT_ACTED_ON.items())]


# Java keys that pybroker reads but does not use: warned about as such, not as typos.
JAVA_KEYS_NOT_USED = frozenset((
    "rocketmqHome", "messageStorePlugIn", "sendMessageThreadPoolNums",
    "pullMessageThreadPoolNums", "processReplyMessageThreadPoolNums",
    "queryMessageThreadPoolNums", "adminBrokerThreadPoolNums", "clientManageThreadPoolNums",
    "consumerManageThreadPoolNums", "heartbeatThreadPoolNums", "endTransactionThreadPoolNums",
    "sendThreadPoolQueueCapacity", "pullThreadPoolQueueCapacity", "useReentrantLockWhenPutMessage",
    "serverSelectorThreads", "serverCallbackExecutorThreads", "useEpollNativeSelector",
    "serverPooledByteBufAllocatorEnable", "clientWorkerThreads", "clientCallbackExecutorThreads",
    "waitTimeMillsInPullQueue",
    "rmqAddressServerDomain", "rmqAddressServerSubGroup", "highSpeedMode", "transferMsgByHeap",
    "filterSupportRetry", "storeReplyMessageEnable", "disableConsumeIfConsumerReadSlowly",
    "consumerFallbehindThreshold", "maxMsgsNumBatch",
    "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue",
    "productEnvName", "clusterTest", "configStorePath", "flushConsumerOffsetHistoryInterval",
    "ackMessageThreadPoolNums", "ackThreadPoolQueueCapacity",
    # 5.x timer (issue #23): Java's thread counts and queues of its timer services (one task
    # here), its hourly metrics revision (not built; the counts are kept exact as they change)
    # and two switches Java 5.3.3 itself no longer reads.
    "timerGetMessageThreadNum", "timerPutMessageThreadNum", "timerEnableDisruptor",
    "timerEnableCheckMetrics", "timerCheckMetricsWhen", "timerMetricSmallThreshold",
    "timerInterceptDelayLevel", "timerColdDataCheckIntervalMs",
))
# Java keys naming features pybroker lacks; any value but Java's default stops start-up.
JAVA_KEYS_UNSUPPORTED = {
    "enableDLegerCommitLog": "false", "fetchControllerAddrByDnsLookup": "false",
    # A NameServer with an embedded controller: run Apache's controller (README).
    "enableControllerInNamesrv": "false",
    "enableConsumeQueueExt": "false", "duplicationEnable": "false",
    "popConsumerKVServiceEnable": "false",
}
