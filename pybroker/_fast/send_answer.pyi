# Python face of pybroker._fast.send_answer: none. It is C-level only (send_path cimports it);
# the templates it fills are built by pybroker.broker.send_fast.response_template.
