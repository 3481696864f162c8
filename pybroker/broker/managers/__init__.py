# Broker metadata managers, split as RocketMQ splits them; MetadataState composes them.
"""One module per kind of broker metadata (Java's class in parentheses):

* :mod:`.topic_config` - topics and their persistence, topics.json (TopicConfigManager)
* :mod:`.subscription_group` - group configs, subscriptionGroup.json (SubscriptionGroupManager)
* :mod:`.consumer_offset` - committed offsets, consumerOffset.json (ConsumerOffsetManager)
* :mod:`.producer` - live producer channels by group (ProducerManager)
* :mod:`.consumer` - live consumer channels and subscriptions by group (ConsumerManager)
* :mod:`.rebalance_lock` - ordered-consume queue locks (RebalanceLockManager)
* :mod:`.client_calls` - commands sent to clients and their answers (Broker2Client)

They hold state only; the single writer that owns them all is
:class:`pybroker.broker.metadata.MetadataState` in the metadata service.
"""
