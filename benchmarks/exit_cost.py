"""What a forked child's exit costs, by the memory it shares with its parent.

`.venv/bin/python -m benchmarks.exit_cost [--heap 25] [--touch 5] [--forks 40]` holds `--heap`
MiB of Python objects, then forks `--forks` times; each child writes (copies) the first
`--touch` MiB of them, takes a `CLOCK_MONOTONIC` timestamp and calls `os._exit(0)`; the parent
times from that timestamp to its pidfd turning readable (the kernel has torn the child's address
space down and reported the exit). Prints the median, the first five dropped. A zygote child
exits the same way (`os._exit` after `exit`), with the zygote's heap mapped: this is the part of
its dispose that no code of tether's runs in (see benchmarks/notes.md, zygote_run).
"""

from __future__ import annotations

import argparse
import os
import select
import statistics
import time

PAGE = 4096


def exit_seen_after(heap_mib: int, touch_mib: int, forks: int) -> list[float]:
    """Milliseconds from each child's last instruction to its exit being seen."""
    heap = [bytearray(PAGE) for _ in range(heap_mib * 256)]
    for page in heap:
        page[0] = 1  # resident in the parent before any fork
    touched = heap[: touch_mib * 256]
    r, w = os.pipe()
    seen: list[float] = []
    try:
        for _ in range(forks):
            pid = os.fork()
            if pid == 0:
                for page in touched:
                    page[1] = 2  # copy-on-write: the child's own copy
                os.write(w, time.monotonic_ns().to_bytes(8, "little"))
                os._exit(0)
            pidfd = os.pidfd_open(pid)
            try:
                last = int.from_bytes(os.read(r, 8), "little")
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll()
                seen.append((time.monotonic_ns() - last) / 1e6)
            finally:
                os.close(pidfd)
                os.waitpid(pid, 0)
            time.sleep(0.02)
    finally:
        os.close(r)
        os.close(w)
    return seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heap", type=int, default=25, help="MiB the parent holds (default 25)")
    ap.add_argument("--touch", type=int, default=5, help="MiB each child copies (default 5)")
    ap.add_argument("--forks", type=int, default=40)
    args = ap.parse_args()
    if args.touch > args.heap:
        ap.error("--touch cannot be more than --heap")
    if args.forks < 6:
        ap.error("--forks must be at least 6 (the first five are dropped)")
    seen = exit_seen_after(args.heap, args.touch, args.forks)
    print(
        f"heap {args.heap} MiB, each child copies {args.touch} MiB: its exit is seen "
        f"{statistics.median(seen[5:]):.2f} ms after its last instruction (median of "
        f"{len(seen) - 5})"
    )


if __name__ == "__main__":
    main()
