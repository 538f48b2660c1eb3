"""Run a command in a private network namespace whose only way out is the model gateway.

    in_netns.py FD [--url-env NAME[=SUFFIX]]... -- COMMAND...

Unshares the network namespace (root only), brings its loopback up, makes a listening socket on
127.0.0.1 inside it and sends that socket to the parent over the inherited AF_UNIX socket FD
(SCM_RIGHTS), so the parent's gateway accepts connections made inside this namespace. Then each
NAME is set to `http://127.0.0.1:PORT` + SUFFIX and COMMAND is executed. Nothing else is
reachable from inside: the namespace has no other interface.

This is how the sandbox is meant to let a foreign agent reach the gateway and nothing else; the
tests use it so that third-party agents can never send anything past loopback.
Exits 97 (with the reason on stderr) when the namespace cannot be made.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def main() -> None:
    args = sys.argv[1:]
    fd = int(args.pop(0))
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    url_env = [options[i + 1] for i, o in enumerate(options) if o == "--url-env"]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        print(f"in_netns: unshare: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        sys.exit(97)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))
        flags = struct.unpack("16sH", ifr[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    channel = socket.socket(fileno=fd)
    socket.send_fds(channel, [str(port).encode()], [listener.fileno()])
    channel.close()
    listener.close()
    env = dict(os.environ)
    for item in url_env:
        name, _, suffix = item.partition("=")
        env[name] = f"http://127.0.0.1:{port}{suffix}"
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
