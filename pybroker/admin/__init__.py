# pybroker.admin
