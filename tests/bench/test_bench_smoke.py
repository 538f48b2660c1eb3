"""Smoke test of the benchmarks: `--quick` runs every figure and writes a complete report.

No timing is asserted here (timings belong to `scripts/bench`, never to tests): only that each
figure was measured and that the report names the machine, every target and every figure.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _report_targets() -> int:
    """How many targets the report judges (benchmarks/ is not an installed package)."""
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks/report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return len(module.TARGETS)


FIGURES = {
    "floor.spawn_exit",
    "floor.spawn_line",
    "floor.eof_exit",
    "floor.pingpong_blocking",
    "floor.pingpong_asyncio",
    "floor.transfer_p2c",
    "floor.transfer_c2p",
    "floor.flood_asyncio",
    "floor.swarm",
    "floor.rss_bare",
    "floor.uss_bare",
    "floor.crash_exit",
    "tether.spawn_ready",
    "context.libs_spawn_line",
    "tether.ping",
    "tether.transfer_p2c",
    "tether.transfer_c2p",
    "tether.model_complete",
    "tether.agent_run",
    "context.asyncio.rss",
    "context.ping_tiny",
    "tether.events",
    "tether.dispose_polite",
    "tether.dispose_stubborn",
    "tether.dispose_stubborn_default",
    "tether.fleet_ready",
    "tether.fleet_ping_p99",
    "tether.fleet_uss",
    "tether.fleet_dispose",
    "context.fleet_ping_one",
    "tether.zygote_spawn_ready",
    "context.run_one_zygote",
    "context.zygote_spawn_exit",
    "context.zygote_run_unavoidable",
    "context.run_back_to_back",
    "context.pool_handover",
    "context.transfer_c2p_codec",
    "tether.crash_result",
    "context.crash_exit_same",
    "context.crash_run_fails",
    "context.crash_result_process",
    "context.proc_snapshot",
    "tether.swarm",
    "tether.swarm_rss",
    "tether.rss",
    "tether.uss",
    "tether.pool_acquire",
    "tether.follow_up",
    "tether.agent_spawn",
    "tether.cold_resume",
    "tether.cold_resume_long",
    "tether.wake_first_turn",
    "context.wake",
    "tether.wake_after_restart",
    "context.continue_ping",
    "context.follow_up_unstored",
    "context.fresh_run",
    "floor.acp_prompt",
    "context.load_ping_p50",
    "context.load_ping_p99",
    "tether.broker_p50",
    "tether.broker_p99",
    "tether.broker_turns",
    "context.fanout_bare",
    "tether.fanout",
    "tether.fanout_rate",
    "tether.follow_up_message",
    "floor.provider_python",
    "floor.acp_import",
    "floor.inmemory_run",
    "providers.spawn",
    "providers.fork",
    "providers.inprocess",
    "providers.acp",
    "floor.direct_request",
    "floor.direct_model_call",
    "tether.gateway_call",
    "tether.egress_request",
    "floor.direct_download",
    "tether.egress_download",
    "context.egress_tunnel_download",
    "context.bare_relay_download",
    "context.trace_untraced",
    "tether.trace_run",
    "context.trace_bytes_per_turn",
    "context.trace_record_turn",
    "floor.cli_import",
    "tether.first_run",
    "context.first_result",
    "tether.first_result_prelaunched",
    "context.first_run_exec",
    "tether.cli_run",
}

RAY_FIGURES = {
    "context.ray_local_run",
    "tether.ray_run",
    "context.ray_local_swarm",
    "tether.ray_swarm",
    "context.ray_local_swarm_memory",
    "tether.ray_swarm_memory",
    "context.ray_placement_open",
    "context.ray_cluster_idle",
}
"""Measured only when the ray extra is installed (`scripts/test` installs it)."""

TARGETS = [
    "ping",
    "model/complete",
    "agent/run",
    "cold exec spawn",
    "RSS",
    "1 MiB parent",
    "1 MiB child",
    "agent/event",
    "polite",
    "stubborn",
    "default graces",
    "live children",
    "zygote spawn",
    "through the zygote",
    "crash",
    "acquire",
    "egress proxy adds",
    "through the egress proxy",
    "traced",
    "a follow-up to a live run",
    "task calls in one turn",
    "asking for model turns at once",
    "on another Ray node",
    "through the gateway adds",
]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_quick_bench_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "performance.md"
    raw = tmp_path / "samples.json"
    argv = ["--quick", "--out", str(out), "--json", str(raw)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    saved = json.loads(raw.read_text())
    samples = {fig["key"]: fig for fig in saved["figures"]}
    expected = FIGURES | (RAY_FIGURES if importlib.util.find_spec("ray") else set())
    missing = expected - samples.keys()
    assert not missing, f"figures not measured: {sorted(missing)}"
    for key, fig in samples.items():
        assert fig["samples"], f"{key} has no samples"
    report = out.read_text()
    for section in (
        "## Machine",
        "## Targets",
        "## Floors",
        "## tether",
        "## Context",
        "## Providers",
    ):
        assert section in report
    for word in ("CPU:", "kernel:", "Python:", "date:"):
        assert word in report
    targets = report.split("## Targets", 1)[1].split("## Floors", 1)[0]
    rows = [line for line in targets.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + _report_targets()  # header + one row per target
    for row in rows[1:]:
        assert row.rstrip().endswith(("| met |", "| **missed** |")), row
    for needle in TARGETS:
        assert needle in targets, needle
    # the four restated targets are judged over their bounds, each with that bound's own
    # ratio to the bare floor beside it
    for needle in (
        "cold exec spawn",
        "idle cold child RSS",
        "one whole run through the zygote",
        "1 MiB child",
    ):
        (row,) = [row for row in rows if needle in row]
        assert "that bound itself: " in row, row
    (crash,) = [row for row in rows if "crash → result" in row]
    assert "the same child's own death, without tether alone: " in crash, crash
    # and the egress download what any relay process costs here
    (egress,) = [row for row in rows if "through the egress proxy" in row]
    assert "a bare relay process alone: " in egress, egress


@pytest.mark.timeout(120)
def test_the_orchestration_benchmark_measures_each_figure() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.orchestration", "--rounds", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["plain", "delegated", "demo", "overhead"]
