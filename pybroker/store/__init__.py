# pybroker.store: RocketMQ's on-disk storage, correct in one process, no process knowledge.
