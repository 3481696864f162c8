# Python face of pybroker._fast.send.slots: the class only; SendPath.open_slot / close_slot /
# set_slot_fd / send_outputs use it.

class ConnectionSlots: ...
