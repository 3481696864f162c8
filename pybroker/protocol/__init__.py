# pybroker.protocol: wire facts and codecs. No I/O, no store.
