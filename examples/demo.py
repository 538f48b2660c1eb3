"""The tether demo: sub-agents in supervised child processes, on embedded defaults.

No network and no keys: the model is scripted from files in examples/. Every run's result is
shown, failures included, and nothing is left running afterwards. The last case is an
orchestrated run: an orchestrator child delegates through the task tool to two explorers in
parallel, then to a tester whose three-file change a verifier fails once and passes after a
fix (all scripted in examples/orchestrate.json; the same run from the shell:
`tether orchestrate PROMPT --model scripted:examples/orchestrate.json --workspace COPY`).

Then two layered orchestrations (examples/layered.json): two build sub-agents editing the same
file at once, each in a copy-on-write layer of its own (the first change set applied wins, the
second comes back as a conflict with both sides), and three attempts at one change, each in
its own layer, the verifier choosing the one that is applied.
"""

from __future__ import annotations

import tether

# First, before the other imports: the zygote that forks the sub-agents' children imports the
# child runtime while this program imports the rest (tether's own included).
tether.prelaunch()

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from tether import AgentDefinition, ChildConfig, Event, Limits, Supervisor, VerifierPolicy, role
from tether.console import LiveView, printer, render_orchestration, render_result

HERE = Path(__file__).resolve().parent


async def main() -> int:
    show = printer(sys.stderr)
    # Work on a copy, so the demo leaves the repository as it found it.
    scratch = Path(tempfile.mkdtemp(prefix="tether-demo-"))
    workspace = scratch / "workspace"
    shutil.copytree(HERE / "workspace", workspace)
    try:
        return await _cases(show, workspace)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


async def _cases(show: Callable[[Event], None], workspace: Path) -> int:
    async with Supervisor(ChildConfig()) as sup:
        cases = [
            (
                "1. An agent reads the workspace, writes a TODO report and completes with it",
                dict(
                    prompt="Find the TODO notes in this workspace and write a report.",
                    agent=role("general", read_only=False),  # general is read-only by default
                    model=f"scripted:{HERE / 'explorer.json'}",
                ),
            ),
            (
                "2. A child that crashes (SIGSEGV) mid-run",
                dict(
                    prompt="anything",
                    command=[sys.executable, "-I", str(HERE / "children" / "segfault.py")],
                ),
            ),
            (
                "3. An agent that wanders until its iteration budget (3) runs out",
                dict(
                    prompt="Summarize the workspace.",
                    agent=AgentDefinition(type="general", max_iterations=3),
                    model=f"scripted:{HERE / 'wanders.json'}",
                ),
            ),
            (
                "4. A child that hangs past its 1 s wall-clock limit",
                dict(
                    prompt="anything",
                    command=[sys.executable, "-I", "-c", "import time; time.sleep(60)"],
                    limits=Limits(wall="1s"),
                ),
            ),
        ]
        for title, kwargs in cases:
            print(f"\n{title}", flush=True)
            started = time.monotonic()
            result = await sup.run(
                workspace=workspace,
                on_event=show,
                **kwargs,  # type: ignore[arg-type]
            )
            print(render_result(result))
            for artifact in result.artifacts:
                if artifact.fs_type == "file":
                    print(f"  --- {Path(artifact.path).name} ---")
                    print("  " + Path(artifact.path).read_text().strip().replace("\n", "\n  "))
            print(f"({time.monotonic() - started:.2f}s)", flush=True)
        await _orchestrated(sup, workspace)
        await _layered(sup, workspace)
    return 0


async def _orchestrated(sup: Supervisor, workspace: Path) -> None:
    print(
        "\n5. An orchestrator delegates: two explorers in parallel, then a tester whose "
        "three-file change is verified, failed, fixed and verified again",
        flush=True,
    )
    started = time.monotonic()
    got = await sup.orchestrate(
        "Fix the negative-stock TODO in this workspace, with tests.",
        model=f"scripted:{HERE / 'orchestrate.json'}",
        workspace=workspace,
        on_event=LiveView(sys.stderr),
    )
    print(render_orchestration(got))
    print("  --- inventory.py after the run ---")
    print("  " + (workspace / "inventory.py").read_text().strip().replace("\n", "\n  "))
    print(f"({time.monotonic() - started:.2f}s)", flush=True)


async def _layered(sup: Supervisor, workspace: Path) -> None:
    model = f"scripted:{HERE / 'layered.json'}"
    print(
        "\n6. Two build sub-agents edit inventory.py at once, each in a layer of its own: the "
        "first change set applied wins, the second reports a conflict",
        flush=True,
    )
    started = time.monotonic()
    (workspace / "inventory.py").write_text((HERE / "workspace" / "inventory.py").read_text())
    got = await sup.orchestrate(
        "Guard adjust() and reword its note, both at once.",
        model=model,
        workspace=workspace,
        workspace_mode="layered",
        on_event=LiveView(sys.stderr),
    )
    print(render_orchestration(got))
    for call in got.tasks:
        applied = call.output.applied
        for conflict in applied.conflicts if applied is not None else []:
            print(f"  conflict in {call.tool_call_id} at {conflict.path}:")
            print("    workspace: " + conflict.workspace.strip().replace("\n", "\n               "))
            print("    layer:     " + conflict.layer.strip().replace("\n", "\n               "))
    print(f"({time.monotonic() - started:.2f}s)", flush=True)
    print(
        "\n7. Three attempts at one change, each in its own layer; the verifier picks the one "
        "applied",
        flush=True,
    )
    started = time.monotonic()
    got = await sup.orchestrate(
        "Add total() to inventory.py.",
        model=model,
        workspace=workspace,
        workspace_mode="layered",
        apply="on_verified",
        verifier=VerifierPolicy(max_fix_cycles=0),
        on_event=LiveView(sys.stderr),
    )
    print(render_orchestration(got))
    output = got.tasks[0].output
    for report in output.attempts:
        print(
            f"  attempt {report.attempt}: {report.status}, verdict {report.verdict}: "
            f"{report.summary}"
        )
    print(f"  taken: attempt {output.taken} ({output.taken_because})")
    print("  --- inventory.py after the run ---")
    print("  " + (workspace / "inventory.py").read_text().strip().replace("\n", "\n  "))
    print(f"({time.monotonic() - started:.2f}s)", flush=True)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
