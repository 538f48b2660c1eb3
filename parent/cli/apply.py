"""`tether apply RESULT.json [--discard]`: apply a layered run's change set to its workspace
later (a run with `--apply never`), or throw its layer away. RESULT.json: a RunResult (`tether
run --json`), a task's output (an item of `tether orchestrate --json`'s `tasks`, its `output`),
or a change set.

Exit status: 0 applied (or discarded), 1 refused (a conflict: nothing applied) or failed
(every change undone), 2 bad usage (no change set in the file, not a layer directory).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from tether.parent.cli.options import UsageError
from tether.parent.run import apply as applying
from tether.protocol.messages import ApplyOutcome, ChangeSet


def change_set_of(data: bytes, name: str) -> ChangeSet:
    """The change set a file holds: a RunResult's (`tether run --json`), a task output's (a
    `tether orchestrate --json` task's `output`), or a ChangeSet itself."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise UsageError(f"tether apply: {name} is not JSON: {exc}") from exc
    found = raw.get("changes") if isinstance(raw, dict) and "layer" not in raw else raw
    if not isinstance(found, dict):
        raise UsageError(f"tether apply: {name} holds no change set (not a layered run)")
    try:
        return msgspec.convert(found, ChangeSet)
    except msgspec.ValidationError as exc:
        raise UsageError(f"tether apply: {name}: not a change set: {exc}") from exc


def main(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.result == "-" else Path(args.result).read_bytes()
    except OSError as exc:
        raise UsageError(f"tether apply: cannot read {args.result}: {exc.strerror}") from exc
    cs = change_set_of(data, args.result)
    if args.discard:
        applying.discard(cs)  # a ValueError (not a layer) is bad usage: exit 2
        outcome = ApplyOutcome(state="discarded", message=f"the layer {cs.layer} was removed")
    else:
        outcome = applying.apply(cs)
        if outcome.state == "applied":
            applying.discard(cs)
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(outcome)).decode() + "\n")
    else:
        for line in applying.lines(outcome):
            print(line)
        for c in outcome.conflicts:
            print(f"--- workspace: {c.path}\n{c.workspace}\n+++ layer: {c.path}\n{c.layer}")
    return 0 if outcome.state in ("applied", "discarded") else 1
