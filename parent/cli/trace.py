"""`tether trace show FILE [--json] [--full]` and `tether trace schema`: read traces.

`show` prints a trace as a transcript (model calls with their new messages, answers, tool
calls, the child's reports, results, usage per call), the child's and the model's words
stripped of control characters; with the traces of the sub-agent runs it started, when they
are in the same directory. `--json` prints the whole as one JSON document for tools. `schema`
prints the JSON Schema of a trace line. Exit status 0, or 2 for a file that is not a trace.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(
        dest="trace_cmd", metavar="{show,schema}", required=True, parser_class=type(p)
    )
    show = sub.add_parser("show", help="print a trace as a transcript")
    show.add_argument("file", metavar="FILE", help="a trace (a .jsonl file of --trace DIR)")
    show.add_argument("--json", action="store_true", help="print it as one JSON document")
    show.add_argument("--full", action="store_true", help="do not cut long texts")
    show.add_argument(
        "--no-linked",
        action="store_true",
        help="leave out the traces of the sub-agent runs it started",
    )
    sub.add_parser("schema", help="print the JSON Schema of one trace line")


def main(args: argparse.Namespace) -> int:
    """Raises ValueError (bad usage, exit 2) for a file that is not a readable trace."""
    if args.trace_cmd == "schema":
        from tether.parent.trace.schema import render as render_schema

        sys.stdout.write(render_schema())
        return 0
    import msgspec

    from tether.parent.run.terminal import clean
    from tether.parent.trace.reader import linked, read_trace
    from tether.parent.trace.transcript import as_json, render

    trace = read_trace(args.file)
    subs = [] if args.no_linked else linked(trace)
    if args.json:
        document = msgspec.json.encode(as_json(trace, subs))
        sys.stdout.write(msgspec.json.format(document).decode() + "\n")
    else:
        try:
            print(clean(render(trace, subs, full=args.full)))
            sys.stdout.flush()
        except BrokenPipeError:  # `| head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
