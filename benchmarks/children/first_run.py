"""A fresh process's first run, for the first-run group of `scripts/bench`.

Run as `python first_run.py SPAWNER WORKSPACE SCRIPT [prelaunch]`: imports `tether.parent`,
opens a `Supervisor(ChildConfig(spawner=SPAWNER))`, runs one one-turn scripted run (SCRIPT, the
built-in `general` role) in WORKSPACE and prints one JSON line: nanoseconds from the
supervisor's open to the run's result (`run`) and to the supervisor's close (`closed`), and
from the script's first line to the run's result, its imports included (`start`). Nothing was
planned, probed or started in this process before: the run pays the plan's sandbox trial, the
zygote's start (or the cold child's), the spawn and the run. With `prelaunch`, the script's
first line after taking the time is `tether.prelaunch()`, as a program's would be.
"""

from __future__ import annotations

import time

T0 = time.perf_counter_ns()

import sys

if sys.argv[4:] == ["prelaunch"]:
    import tether

    tether.prelaunch()

import json

import anyio

from tether.parent import ChildConfig, Supervisor


async def main(spawner: str, workspace: str, script: str) -> None:
    t0 = time.perf_counter_ns()
    async with Supervisor(ChildConfig(spawner=spawner)) as sup:
        result = await sup.run("bench", workspace=workspace, model=f"scripted:{script}")
        t1 = time.perf_counter_ns()
    t2 = time.perf_counter_ns()
    if not result.success:
        raise SystemExit(f"the first run failed: {result.failure}")
    print(json.dumps({"run": t1 - t0, "closed": t2 - t0, "start": t1 - T0}))


anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
