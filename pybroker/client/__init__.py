# pybroker.client
