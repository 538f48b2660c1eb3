"""Network by policy without root: a supervisor run as uid 1000 (Debian's /usr/bin/python3,
PYTHONPATH at the project) cannot make a private network namespace, so its child keeps the
host's network and the sandbox's Landlock rule lets it connect to the proxy's port only. An
allowed host works through the proxy; another host is the proxy's 403; another port is
refused by the sandbox (EACCES); and the documented gap is pinned: the proxy's port number on
another address is not refused by the sandbox (the kernel refuses it only because nothing
listens there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from egress_kit import site

import tether.contain

pytestmark = pytest.mark.slow

USER = 1000
AS_USER = ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"]
DEBIAN_PY = "/usr/bin/python3"
HERE = Path(__file__).parent
PROJECT = [
    sysconfig.get_paths()["purelib"],
    str(Path(tether.contain.__file__).parent.parent.parent),
]


def _usable() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and setpriv to start a supervisor as uid 1000"
    if not os.access(DEBIAN_PY, os.X_OK):
        return f"no {DEBIAN_PY}"
    got = subprocess.run(
        [
            *AS_USER,
            "env",
            f"PYTHONPATH={':'.join(PROJECT)}",
            DEBIAN_PY,
            "-c",
            "import tether.parent.supervisor",
        ],
        capture_output=True,
        timeout=60,
    )
    return None if got.returncode == 0 else "uid 1000 cannot import the project here"


WHY_NOT = _usable()


@pytest.fixture
def user_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tether-user-net-", dir="/tmp"))
    os.chmod(path, 0o755)
    os.chown(path, USER, USER)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))
def test_without_root_the_landlock_port_rule_keeps_the_child_to_its_proxys_port(
    user_dir: Path,
) -> None:
    with site("pkg.test") as pkg, site("other.test") as other:
        ws = user_dir / "ws"
        ws.mkdir()
        shutil.copy(HERE / "net_probes.py", ws / "net_probes.py")
        plan = [
            ["allowed", "fetch", [f"http://pkg.test:{pkg.port}/hello"]],
            ["other_host", "fetch", [f"http://other.test:{other.port}/hello"]],
            ["other_port", "direct", ["127.0.0.1", other.port]],
            ["proxy_port_elsewhere", "direct", ["127.0.0.2", 0]],
            ["udp", "udp", ["127.0.0.1", other.port]],
            ["unix", "unix", []],
        ]
        (ws / "plan.json").write_text(json.dumps(plan))
        for path in (ws, *ws.iterdir()):
            os.chown(path, USER, USER)
        config = {
            "workspace": str(ws),
            "allow": [f"pkg.test:{pkg.port}"],
            "names": {"pkg.test": "127.0.0.1", "other.test": "127.0.0.1"},
            "read_paths": PROJECT,
        }
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": ":".join(PROJECT)}
        got = subprocess.run(
            [
                *AS_USER,
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                DEBIAN_PY,
                str(HERE / "user_net_host.py"),
                json.dumps(config),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert got.returncode == 0, got.stderr
        result = json.loads(got.stdout.strip().splitlines()[-1])
        report = json.loads((ws / "report.json").read_text())
    assert result["success"], result
    assert result["isolation"]["network"]["enforced"] == "port"
    assert report["allowed"] == "ok: 200 hello from pkg.test\n"
    assert report["other_host"].startswith("refused: 403"), report["other_host"]
    assert "PermissionError" in report["other_port"], report["other_port"]  # Landlock: EACCES
    # The gap docs/containment.md names: Landlock rules are ports, not addresses.
    assert "ConnectionRefusedError" in report["proxy_port_elsewhere"], report
    assert report["udp"].startswith("refused") and report["unix"].startswith("refused")
    assert other.seen == []
