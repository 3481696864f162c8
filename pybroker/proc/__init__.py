# pybroker.proc
