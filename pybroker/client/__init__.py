# pybroker.client: asyncio RocketMQ client (producer, consumers, admin); blocking facade in .sync
"""Python client of the RocketMQ remoting protocol.

asyncio classes are exported here; :mod:`pybroker.client.sync` has blocking twins of the same
names.
"""
from pybroker.acl.signature import Credentials
from pybroker.client.admin import Admin
from pybroker.client.consumer import PushConsumer
from pybroker.client.instance import ClientInstance
from pybroker.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pybroker.client.listener import (ConsumeContext, ConsumeOrderlyContext, ConsumeOrderlyStatus,
                                      ConsumeStatus)
from pybroker.client.pop_consumer import PopConsumer, PopPushConsumer
from pybroker.client.producer import Producer
from pybroker.client.pull_consumer import LitePullConsumer
from pybroker.client.rebalance import (AllocateConsistentHash, allocate_average,
                                       allocate_average_by_circle)
from pybroker.client.route import SelectByHash, SelectManual, SelectRoundRobin
from pybroker.client.selector import MessageSelector
from pybroker.client.transaction import (LocalTransactionState, TransactionProducer,
                                         TransactionSendResult)
from pybroker.protocol.constants import ConsumeFromWhere, MessageModel

__all__ = ["Admin", "AllocateConsistentHash", "ClientInstance", "ConsumeContext", "Credentials",
           "ConsumeFromWhere", "ConsumeOrderlyContext", "ConsumeOrderlyStatus", "ConsumeStatus",
           "LitePullConsumer", "LocalTransactionState", "Message", "MessageExt", "MessageModel",
           "MessageQueue", "MessageSelector", "PopConsumer", "PopPushConsumer", "Producer",
           "PushConsumer", "SelectByHash", "SelectManual", "SelectRoundRobin", "SendResult",
           "SendStatus", "TransactionProducer", "TransactionSendResult", "allocate_average",
           "allocate_average_by_circle"]
