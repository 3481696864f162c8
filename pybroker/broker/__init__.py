# pybroker.broker
