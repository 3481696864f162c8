# Python face of pybroker._fast.send.held: none. It is C-level only (send/complete.pyx cimports it).
