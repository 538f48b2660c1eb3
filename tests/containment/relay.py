"""Stands in for ssh: `relay.py -T -o OPT ... -- HOST REMOTE_COMMAND`.

Runs REMOTE_COMMAND with `sh -c` in a session of its own and without the tether tree marker
(as on another host: no signal to our tree and no scan of our environment markers can reach
it), and copies bytes both ways. When our stdin ends it closes the far side's stdin and waits
for the far side to exit: EOF is the far child's only lifeline. Exits with the far side's
status.
"""

import os
import subprocess
import sys
import threading


def pump(src: int, dst: int, close_dst: bool) -> None:
    while True:
        try:
            data = os.read(src, 65536)
        except OSError:
            data = b""
        if not data:
            break
        try:
            os.write(dst, data)
        except OSError:
            break
    if close_dst:
        os.close(dst)


def main() -> int:
    args = sys.argv[1:]
    remote = args[args.index("--") + 2]
    env = {k: v for k, v in os.environ.items() if k != "TETHER_TREE"}
    far = subprocess.Popen(
        ["/bin/sh", "-c", remote],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert far.stdin is not None and far.stdout is not None
    up = threading.Thread(target=pump, args=(far.stdout.fileno(), 1, False), daemon=True)
    up.start()
    pump(0, far.stdin.fileno(), True)
    far.stdin = None  # closed above
    code = far.wait(timeout=10)
    up.join(timeout=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
