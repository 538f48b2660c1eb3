"""`tether run` prints the stop's receipt in one line when Ctrl-C stops it, and `--json`
carries it (`stop`); the numbers are checked against what the run was doing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TETHER = [sys.executable, "-m", "tether.parent.cli"]
LINE = re.compile(
    r"^stopped \(interrupted\): asked \d\d:\d\d:\d\d, everything gone ([\d.]+) s later "
    r"\(1 run, ladder rung (\w+)\); 0 processes left, 0 model turns admitted after the stop "
    r"\((\d+) in flight abandoned\), 0 tokens billed after it$"
)


def _interrupted(tmp_path: Path, *more: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`tether run` on a model whose first turn takes a minute, SIGINTed during that turn."""
    script = tmp_path / "slow.json"
    script.write_text('[{"text": "thinking", "delay": 60}]')
    argv = ["run", "hi", "--model", f"scripted:{script}", "--workspace", str(tmp_path), *more]
    proc = subprocess.Popen(
        [*TETHER, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    while "step" not in line and line:  # the child asked for its first turn
        line = proc.stderr.readline()
    time.sleep(0.2)
    asked = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), asked


@pytest.mark.parametrize("json_out", [False, True])
def test_ctrl_c_prints_the_stop_receipt_in_one_line_and_json_carries_it(
    tmp_path: Path, json_out: bool
) -> None:
    got, asked = _interrupted(tmp_path, *(["--json"] if json_out else []))
    assert got.returncode == 130, got.stderr
    if not json_out:
        [line] = [x for x in got.stdout.splitlines() if x.startswith("stopped (")]
        match = LINE.match(line)
        assert match is not None, line
        assert match.group(3) == "1"  # the turn the model was taking when Ctrl-C came
        return
    stop = json.loads(got.stdout)["stop"]
    assert stop["reason"] == "interrupted" and stop["runs"] == 1
    assert asked - 1 <= stop["askedAt"] <= stop["goneAt"] <= time.time()
    assert stop["processesLeft"] == 0
    assert stop["turnsAfterStop"] == 0 and stop["tokensAfterStop"] == 0
    assert stop["turnsAbandoned"] == 1
    assert stop["rung"] in ("shutdown", "exit", "sigterm", "sigkill")
