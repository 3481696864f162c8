"""The send fast path (docs/architecture/send-fast-path.md), one concern per extension.

``read`` a send request in place (its header through ``pybroker._fast.request_read``, which the
pull fast path shares), ``topics`` the fast table, ``slots`` the connections and their response
bytes, ``held`` the FIFOs of puts and the acknowledgement holds of both paths, ``answer`` a
response frame from its template, ``stats`` the counting, ``complete`` a put of either path
from its queueing to its answer (``SendCompletions``), and ``take`` the frames taken into the
ring (``SendPath``, a ``SendCompletions``: the class a worker uses), ``port`` a connection's
take with fast failure's check and the appender's wake-up around it (``PortTake``, which the
reader in C of a plain socket calls without a Python frame). Each has a ``.pxd`` (its
C contract), a ``.pyx`` (the body) and a ``.pyi`` (what Python sees).
"""
