"""The POP fast path's pieces (docs/architecture/pop.md), one concern per extension.

``ack`` reads an ACK_MESSAGE in place (its header through ``pybroker._fast.request_read``),
parses its receipt handle and writes its ack record (a timer message for the revive log, through
``pybroker._fast.send.timer``'s put-time rule), each as the Python handler
(``pybroker/broker/pop/ack.py``) would. Each has a ``.pxd`` (its C contract), a ``.pyx`` (the
body) and a ``.pyi`` (what Python sees).
"""
