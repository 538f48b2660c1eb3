"""Takes the run, writes half a message without its newline, and exits 0."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _wire

run = _wire.wait_run()
_wire.write_raw(b'{"jsonrpc":"2.0","id":' + str(run["id"]).encode() + b',"result":{"succ')
os._exit(0)
