"""The first-run group of `scripts/bench`: what a fresh process pays for its first run, and
what `tether run` takes from the command to its exit.

Per round, interleaved: `python -c "import tether.parent.cli.main"` spawn to exit (the CLI's
import alone, its floor); a fresh process's first run through the zygote and the same through a
cold exec child (`children/first_run.py`: `Supervisor()` opened → the one-turn run's result,
the plan's sandbox trial and the zygote's or child's start included), and the same program
timed from its first line, with and without `tether.prelaunch()` as that line; and `tether
run` of the same run, spawn to exit. Every process runs with bytecode caches
(`PYTHONDONTWRITEBYTECODE` is left out of their environment, so the dropped round 0 writes any
that are missing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchmarks.report import Figure, Results

CHILDREN = Path(__file__).resolve().parent / "children"
ONE_TURN = (
    '{"turns": [{"text": "done", "toolCalls": [{"name": "complete", '
    '"arguments": {"summary": "ok", "paths": []}}]}]}'
)
TIMEOUT = 60


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _spawn_to_exit(argv: list[str], cwd: str) -> float:
    """Milliseconds from just before `subprocess.run` to its return; the command must succeed."""
    t0 = time.perf_counter_ns()
    got = subprocess.run(argv, env=_env(), cwd=cwd, capture_output=True, timeout=TIMEOUT)
    took = (time.perf_counter_ns() - t0) / 1e6
    if got.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed: {got.stderr.decode(errors='replace')[-2000:]}")
    return took


def _first_run(spawner: str, workspace: str, script: str, *extra: str) -> dict[str, float]:
    """The child's figures in milliseconds: `run` (the supervisor's open to the result) and
    `start` (the script's first line to the result)."""
    got = subprocess.run(
        [sys.executable, str(CHILDREN / "first_run.py"), spawner, workspace, script, *extra],
        env=_env(),
        capture_output=True,
        timeout=TIMEOUT,
    )
    if got.returncode != 0:
        raise RuntimeError(f"first run ({spawner}): {got.stderr.decode(errors='replace')[-2000:]}")
    return {k: float(v) / 1e6 for k, v in json.loads(got.stdout).items()}


async def first_run_group(res: Results, rounds: int) -> None:
    """Blocking subprocess calls: nothing else runs on the event loop meanwhile."""
    s: defaultdict[str, list[float]] = defaultdict(list)
    tether = str(Path(sys.executable).with_name("tether"))
    with tempfile.TemporaryDirectory(prefix="tether-first-run-") as scratch:
        script = os.path.join(scratch, "turns.json")
        Path(script).write_text(ONE_TURN)
        workspace = os.path.join(scratch, "ws")
        os.mkdir(workspace)
        cli = [tether, "run", "--model", f"scripted:{script}", "--workspace", workspace]
        for rnd in range(rounds + 1):  # round 0 writes any missing bytecode caches: dropped
            s["floor.cli_import"].append(
                _spawn_to_exit([sys.executable, "-c", "import tether.parent.cli.main"], scratch)
            )
            first = _first_run("auto", workspace, script)
            s["tether.first_run"].append(first["run"])
            s["context.first_result"].append(first["start"])
            prelaunched = _first_run("auto", workspace, script, "prelaunch")
            s["tether.first_result_prelaunched"].append(prelaunched["start"])
            s["context.first_run_exec"].append(_first_run("exec", workspace, script)["run"])
            s["tether.cli_run"].append(_spawn_to_exit([*cli, "--quiet", "bench"], scratch))
            if rnd == 0:
                s.clear()
    res.add(
        Figure(
            "floor.cli_import",
            '`python -c "import tether.parent.cli.main"`, spawn to exit',
            "ms",
            s["floor.cli_import"],
            "the interpreter's start and the CLI's imports (with bytecode caches), nothing run",
        )
    )
    res.add(
        Figure(
            "tether.first_run",
            "a fresh process's first run (the zygote started for it)",
            "ms",
            s["tether.first_run"],
            "`benchmarks/children/first_run.py`: from `Supervisor()` opened to `run()` returning "
            "a one-turn scripted run of the `general` role, in a process that had planned, "
            "probed and started nothing: the plan (the host's sandbox tried once), the zygote's "
            "start (launched by the plan, ready while the plan goes on), the fork, the run",
            floor="context.first_run_exec",
        )
    )
    res.add(
        Figure(
            "context.first_run_exec",
            "a fresh process's first run, by exec",
            "ms",
            s["context.first_run_exec"],
            'the same with `ChildConfig(spawner="exec")`: the plan, then a cold child started '
            "by exec instead of a zygote",
        )
    )
    res.add(
        Figure(
            "context.first_result",
            "a fresh program's first result, from its first line",
            "ms",
            s["context.first_result"],
            "the same process as the first run's, timed from its script's first line: its "
            "imports (`tether.parent`, anyio), then the first run as above",
        )
    )
    res.add(
        Figure(
            "tether.first_result_prelaunched",
            "a fresh program's first result, `tether.prelaunch()` its first line",
            "ms",
            s["tether.first_result_prelaunched"],
            "the same program with `tether.prelaunch()` as its first line: the zygote imports "
            "the child runtime while the program imports tether, and the first run takes it",
            floor="context.first_result",
        )
    )
    res.add(
        Figure(
            "tether.cli_run",
            "`tether run` of a one-turn run, spawn to exit",
            "ms",
            s["tether.cli_run"],
            "`tether run --model scripted:FILE --workspace WS --quiet bench` from just before "
            "`subprocess.run` to its return: the CLI's import (the zygote, launched before it, "
            "starts meanwhile), the first run as above, the supervisor's close (the zygote's "
            "and the keeper's exits) and the interpreter's",
            floor="floor.cli_import",
        )
    )
