"""Test-only relay: `python -I stdin_tap.py RECORD CMD...` runs CMD, copies our stdin to its
stdin while appending every byte to RECORD, forwards EOF, and exits with CMD's status.

CMD inherits our stdout and stderr directly, so only the parent→child direction is tapped.
Standard library only (it runs under `python -I`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main() -> None:
    record_path, command = sys.argv[1], sys.argv[2:]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, close_fds=True)
    assert child.stdin is not None
    child_in = child.stdin.fileno()

    def pump() -> None:
        with open(record_path, "ab", buffering=0) as record:
            while True:
                try:
                    chunk = os.read(0, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                record.write(chunk)
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(child_in, view) :]
                except OSError:
                    break
        try:
            child.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass

    threading.Thread(target=pump, daemon=True).start()
    code = child.wait()
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
