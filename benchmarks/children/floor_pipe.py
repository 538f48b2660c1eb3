"""Floor: raw bulk transfer over pipes with os.read/os.write, no framing, no codec.

argv[1] is the direction and argv[2] the size in bytes:
  p2c  read SIZE bytes from stdin, then write one byte back; repeat until stdin ends
  c2p  read one byte from stdin, then write SIZE bytes; repeat until stdin ends
"""

import os
import sys

mode, size = sys.argv[1], int(sys.argv[2])
os.write(1, b"ready\n")
blob = memoryview(b"x" * size)
while True:
    if mode == "p2c":
        got = 0
        while got < size:
            data = os.read(0, 1 << 20)
            if not data:
                sys.exit(0)
            got += len(data)
        os.write(1, b"k")
    else:
        if not os.read(0, 1):
            sys.exit(0)
        view = blob
        while view:
            view = view[os.write(1, view) :]
