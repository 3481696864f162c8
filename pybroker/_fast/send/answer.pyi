# Python face of pybroker._fast.send.answer: none. It is C-level only (send/complete.pyx
# cimports it); the templates it fills are built by pybroker.broker.send_fast.response_template.
