# Shared by the C header readers' tests: a request frame with a few bytes of its header changed.
"""``mutated(frame, rand, specials)``: a copy of a remoting frame with one to three bytes of its
header replaced by a random byte, one of ``specials`` (the characters a JSON or field reader
treats specially) or a byte copied from elsewhere in the header. The readers' tests run both
the C reader and the Python decoder over thousands of them and require the same answer.
"""
import random


def mutated(frame: bytes, rand: random.Random, specials: bytes) -> bytes:
    changed = bytearray(frame)
    header_length = int.from_bytes(changed[4:8], "big") & 0xFFFFFF
    for _ in range(rand.randrange(1, 4)):
        at = 8 + rand.randrange(header_length)
        choice = rand.randrange(3)
        if choice == 0:
            changed[at] = rand.randrange(256)
        elif choice == 1:
            changed[at] = rand.choice(specials)
        else:
            changed[at] = changed[8 + rand.randrange(header_length)]
    return bytes(changed)
