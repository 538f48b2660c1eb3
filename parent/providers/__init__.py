"""Ways to run a sub-agent other than tether's own child: foreign agents driven over their own
protocol, under the same supervision.

- `acp`: an Agent Client Protocol agent (`AcpDriver`), driven over the byte streams of an
  already-spawned process; the parent serves its permission requests and its file reads and
  writes, confined to the workspace (`confined_fs`).
"""
