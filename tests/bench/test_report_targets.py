"""The report's target rows and analysis headings, rendered from made-up figures (pure: no
process is started, nothing is timed)."""

from __future__ import annotations

import datetime as dt
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
X = "\u00d7"
"""The multiplication sign of ratios."""


def _report() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks/report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _rendered(figures: dict[str, float]) -> str:
    report = _report()
    res = report.Results(quick=True)
    for key, value in figures.items():
        res.figures[key] = report.Figure(key, key, "ms", [value] * 5, "made up")
    return str(report.render(res, dt.datetime(2026, 12, 3), 1.0, (0.0, 0.0)))


def _row(text: str, needle: str) -> str:
    targets = text.split("## Targets", 1)[1].split("## Floors", 1)[0]
    rows = [line for line in targets.splitlines() if needle in line]
    assert len(rows) == 1, rows
    return rows[0]


def test_the_cold_spawn_is_judged_over_its_libraries_alone_with_that_bound_beside_it() -> None:
    text = _rendered(
        {"tether.spawn_ready": 90.0, "floor.spawn_line": 10.0, "context.libs_spawn_line": 70.0}
    )
    row = _row(text, "cold exec spawn")
    assert (
        f"90.0 ms vs 70.0 ms (context.libs_spawn_line); that bound itself: 7.00{X} "
        "floor.spawn_line (10.0 ms)"
    ) in row
    assert row.endswith(f"| 1.29{X} | **missed** |")


def test_the_zygote_run_is_judged_over_its_spawn_and_the_childs_exit() -> None:
    text = _rendered(
        {
            "context.run_one_zygote": 6.0,
            "tether.zygote_spawn_ready": 3.0,
            "context.zygote_spawn_exit": 5.4,
        }
    )
    row = _row(text, "one whole run through the zygote")
    assert f"6.00 ms vs 5.40 ms (context.zygote_spawn_exit); that bound itself: 1.80{X}" in row
    assert row.endswith(f"| 1.11{X} | met |")


def test_a_throughput_target_is_judged_over_the_lines_encode_and_decode() -> None:
    text = _rendered(
        {
            "tether.transfer_c2p": 600.0,
            "floor.transfer_c2p": 2000.0,
            "context.transfer_c2p_codec": 800.0,
        }
    )
    row = _row(text, "1 MiB child → parent")
    assert f"that bound itself: 0.40{X} floor.transfer_c2p" in row
    assert row.endswith(f"| 0.75{X} | **missed** |")


def test_the_crash_target_shows_the_same_childs_own_death_beside_it() -> None:
    text = _rendered({"tether.crash_result": 1.8, "context.crash_exit_same": 0.9})
    row = _row(text, "crash → result")
    assert f"1.80 ms; the same child's own death, without tether alone: 0.90 ms, 0.45{X}" in row
    assert row.endswith(f"| 0.90{X} the limit | met |")


def test_a_ratio_that_rounds_to_its_limit_is_printed_with_the_places_that_decide_it() -> None:
    missed = _row(_rendered({"tether.agent_run": 130.04, "context.ping_tiny": 100.0}), "agent/run")
    assert missed.endswith(f"| 1.3004{X} | **missed** |"), missed
    met = _row(_rendered({"tether.agent_run": 129.96, "context.ping_tiny": 100.0}), "agent/run")
    assert met.endswith(f"| 1.2996{X} | met |"), met
    exact = _row(_rendered({"tether.agent_run": 130.0, "context.ping_tiny": 100.0}), "agent/run")
    assert exact.endswith(f"| 1.30{X} | met |"), exact
    far = _row(_rendered({"tether.agent_run": 180.0, "context.ping_tiny": 100.0}), "agent/run")
    assert far.endswith(f"| 1.80{X} | **missed** |"), far


def test_a_target_whose_bound_was_not_measured_is_not_judged() -> None:
    row = _row(_rendered({"tether.spawn_ready": 70.0, "floor.spawn_line": 10.0}), "cold exec")
    assert row.endswith("| not measured in this run | | |")


def test_a_target_not_measured_is_not_called_met_in_the_analysis() -> None:
    text = _rendered(
        {"tether.spawn_ready": 70.0, "floor.spawn_line": 10.0, "context.libs_spawn_line": 66.0}
    )
    assert "| not measured in this run | | |" in _row(text, "idle cold child RSS")
    analysis = text.split("## Analysis", 1)[1]
    assert f"RSS ≤ 1.2{X} a child that only imports the libraries (not measured in this run)" in (
        analysis
    )
    assert "cold exec spawn → ready" in analysis and "(met in this run)" in analysis


def test_the_egress_latency_target_judges_the_time_the_proxy_adds() -> None:
    met = _row(
        _rendered({"tether.egress_request": 600.0, "floor.direct_request": 100.0}),
        "egress proxy adds",
    )
    assert "600 ms vs 100 ms: 500 ms added" in met and met.endswith(f"| 0.50{X} the limit | met |")
    missed = _row(
        _rendered({"tether.egress_request": 1200.0, "floor.direct_request": 100.0}),
        "egress proxy adds",
    )
    assert missed.endswith("| **missed** |"), missed


def test_a_run_on_a_ray_node_is_judged_against_the_same_run_local() -> None:
    met = _row(
        _rendered({"tether.ray_run": 90.0, "context.ray_local_run": 50.0}), "another Ray node"
    )
    assert met.endswith("| met |"), met
    missed = _row(
        _rendered({"tether.ray_run": 110.0, "context.ray_local_run": 50.0}), "another Ray node"
    )
    assert missed.endswith("| **missed** |"), missed


def test_the_gateway_target_judges_the_time_the_gateway_adds_to_a_direct_call() -> None:
    met = _row(
        _rendered({"tether.gateway_call": 1050.0, "floor.direct_model_call": 100.0}),
        "through the gateway adds",
    )
    assert "950 ms added" in met and met.endswith(f"| 0.95{X} the limit | met |"), met
    missed = _row(
        _rendered({"tether.gateway_call": 1200.0, "floor.direct_model_call": 100.0}),
        "through the gateway adds",
    )
    assert missed.endswith("| **missed** |"), missed
