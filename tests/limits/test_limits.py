"""Each limit, when hit, is a result with its own kind, on every containment tier this host
offers (the tier is in each test's id; a tier the host lacks is skipped with the reason)."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest

from tether.parent.process.limits import DisposePolicy, Limits
from tether.parent.supervisor import ChildConfig, Supervisor

pytestmark = pytest.mark.anyio

FAST = ChildConfig(dispose=DisposePolicy(shutdown=0.3, eof=0.3, term=0.5, kill=1.0))


def on(tier: str) -> ChildConfig:
    return dataclasses.replace(FAST, containment=tier)


def py(code: str) -> list[str]:
    return [sys.executable, "-I", "-c", code]


@pytest.mark.parametrize(
    "bad",
    [
        {"memory": "lots"},
        {"memory": "-5M"},
        {"wall": "forever"},
        {"cpu": 0},
        {"processes": 0},
        {"open_files": -1},
        {"file_size": "1Q"},
        {"idle": "0s"},
        {"open_files": 99_999_999_999},
        {"processes": 1 << 40},
        {"memory": 1 << 70},
        {"wall": "999999999h"},
    ],
)
def test_a_bad_limit_is_refused_with_a_clear_error_before_anything_runs(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Limits(**bad)


def test_out_of_range_limits_are_bad_usage_on_the_command_line(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.parent.cli",
            "run",
            "go",
            "--open-files",
            "99999999999",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "--open-files" in done.stderr and "more than this host can apply" in done.stderr


async def test_a_prompt_over_the_childs_message_cap_is_refused_before_any_spawn(
    tmp_path: Path,
) -> None:
    async with Supervisor() as sup:
        with pytest.raises(ValueError, match="more than a child reads in one message"):
            await sup.start("x" * (33 * 1024 * 1024), workspace=tmp_path)
        assert not sup._live


def test_human_units_are_understood() -> None:
    lim = Limits(memory="512M", wall="1.5s", cpu="2m", file_size="64k", idle="250ms")
    assert lim.memory == 512 * 2**20
    assert lim.wall == 1.5 and lim.cpu == 120.0 and lim.idle == 0.25
    assert lim.file_size == 64 * 1024


async def test_a_child_over_its_memory_limit_is_oom(tmp_path: Path, tier: str) -> None:
    # Without a memory cgroup the limit is RLIMIT_DATA: the child dies of MemoryError.
    hog = "x = []\nwhile True:\n    x.append(bytearray(8 << 20))\n"
    async with Supervisor(on(tier)) as sup:
        started = time.monotonic()
        result = await sup.run(
            "go", workspace=tmp_path, command=py(hog), limits=Limits(memory="64M", wall="20s")
        )
    assert result.failure is not None and result.failure.kind == "oom", result
    assert result.failure.limit == "memory=64M"
    assert result.containment == tier
    assert time.monotonic() - started < 15


async def test_a_child_over_its_cpu_time_is_cpu_limit(tmp_path: Path, tier: str) -> None:
    async with Supervisor(on(tier)) as sup:
        result = await sup.run(
            "go",
            workspace=tmp_path,
            command=py("while True:\n    pass\n"),
            limits=Limits(cpu=1, wall="20s"),
        )
    assert result.failure is not None and result.failure.kind == "cpu_limit", result
    assert result.failure.limit == "cpu=1s"


async def test_a_child_writing_past_its_file_size_limit_dies_of_sigxfsz(
    tmp_path: Path, tier: str
) -> None:
    command = ["/bin/sh", "-c", f"head -c 1048576 /dev/zero > {tmp_path / 'big'}"]
    async with Supervisor(on(tier)) as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=command, limits=Limits(file_size="64K", wall="20s")
        )
    assert result.failure is not None and result.failure.kind == "fsize_limit", result
    assert result.failure.limit == "file_size=64K"


async def test_a_python_child_that_fails_on_efbig_is_fsize_limit(tmp_path: Path, tier: str) -> None:
    # Python ignores SIGXFSZ and sees EFBIG ("File too large") instead of dying.
    code = f"open({str(tmp_path / 'big')!r}, 'wb').write(b'x' * (1 << 20))\n"
    async with Supervisor(on(tier)) as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=py(code), limits=Limits(file_size="64K", wall="20s")
        )
    assert result.failure is not None and result.failure.kind == "fsize_limit", result


async def test_a_child_that_forks_past_its_process_limit_is_tasks_limit(
    tmp_path: Path, tier: str
) -> None:
    if tier == "process-group" and os.geteuid() == 0:
        pytest.skip(
            "the process-group tier limits processes with RLIMIT_NPROC, which the kernel does "
            "not apply to root"
        )
    code = (
        "import os, sys, time\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "            os._exit(0)\n"
        "    except OSError as exc:\n"
        "        print('fork failed:', exc, file=sys.stderr)\n"
        "        sys.exit(3)\n"
    )
    async with Supervisor(on(tier)) as sup:
        result = await sup.run(
            "go", workspace=tmp_path, command=py(code), limits=Limits(processes=8, wall="20s")
        )
    assert result.failure is not None and result.failure.kind == "tasks_limit", result
    assert result.failure.limit == "processes=8"


def test_limits_are_in_force_before_the_first_line_of_child_code(tmp_path: Path, tier: str) -> None:
    import anyio

    out = tmp_path / "seen"
    code = (
        "import sys\n"
        f"open({str(out)!r}, 'w').write(open('/proc/self/limits').read() + '\\n---\\n'"
        " + open('/proc/self/cgroup').read())\n"
    )

    async def main() -> None:
        async with Supervisor(on(tier)) as sup:
            await sup.run(
                "go",
                workspace=tmp_path,
                command=py(code),
                limits=Limits(cpu=5, file_size="1M", open_files=64, memory="256M"),
            )

    anyio.run(main)
    limits, cgroups = out.read_text().split("\n---\n")
    rows = {ln[:26].strip(): ln[26:].split() for ln in limits.splitlines()[1:]}
    assert rows["Max cpu time"][:2] == ["5", "6"]
    assert rows["Max file size"][:2] == [str(1 << 20)] * 2
    assert rows["Max open files"][:2] == ["64", "64"]
    assert rows["Max core file size"][:2] == ["0", "0"]
    if tier == "process-group":
        assert rows["Max data size"][:2] == [str(256 << 20)] * 2
    else:
        assert "tether-" in cgroups
