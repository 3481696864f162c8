# Python face of pybroker._fast.send.slots: the class only; SendPath.open_slot / close_slot /
# take_outputs use it.

class ConnectionSlots: ...
