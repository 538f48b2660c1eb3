"""tether's benchmarks: `scripts/bench` runs `python -m benchmarks.bench` and writes
docs/performance.md. Nothing here is imported by the runtime or by tests of the runtime."""
