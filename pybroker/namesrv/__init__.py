# pybroker.namesrv
