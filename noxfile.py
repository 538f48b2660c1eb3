"""The interpreter matrix: tether's tests on every supported Python this machine has.

One session per supported version, `tests-3.11`, `tests-3.12`, `tests-3.13` (tag `matrix`).
Each makes its own virtualenv with that interpreter, installs the project with its test extra
and runs pytest: by default the `FAST` selection (the pure tests and a handful of real-process
smoke tests), or whatever follows `--`:

    .venv/bin/nox -t matrix                       # the fast selection on every interpreter
    .venv/bin/nox -s tests-3.13 -- tests          # the whole suite on 3.13
    .venv/bin/nox -s tests-3.12 -- tests/protocol -k depth

`scripts/test` (and so CI) runs the whole suite with lint and types on the default interpreter
first, then this matrix with `TETHER_MATRIX_SKIP` naming the default's version, whose session
then skips itself rather than run a subset of what just ran.

Interpreters are looked up on `PATH` and in the usual version managers' install folders
(pyenv, asdf, uv); each candidate is run once to check its version, so a pyenv shim for a
version that is not activated does not count. A version that is not found is reported by nox
as a skipped session, by name, never as a pass; nothing is ever downloaded.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import nox

SUPPORTED = ("3.11", "3.12", "3.13")
"""The interpreters tether supports and tests; pyproject's classifiers name exactly these (a
test checks it)."""

FAST = [
    # pure: the wire contract, the codec and depth limit, classification, limits, env scrub
    "tests/protocol",
    "tests/supervisor/test_classify.py",
    "tests/supervisor/test_env.py",
    # child logic, through a real `python -m tether.child` under the session's interpreter
    "tests/child/test_lifecycle.py",
    "tests/child/test_malformed_input.py",
    "tests/child/test_depth_limit.py",
    "tests/child/test_tools.py",
    # the runtime end to end: a real supervisor, spawn, run, dispose, failures as results
    "tests/supervisor/test_depth_limit.py",
    "tests/e2e/test_runs.py",
]
"""What runs on the interpreters other than the default one: fast, and enough to prove the
runtime starts and runs end to end there (the child runs under the parent's `sys.executable`)."""

nox.options.download_python = "never"
nox.options.error_on_missing_interpreters = False
nox.options.reuse_venv = "yes"


def _version_of(python: Path) -> str | None:
    try:
        out = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _newest_first(paths: list[Path], version: str) -> list[Path]:
    """Installs named `3.12.1`, `3.12.10`, `cpython-3.12.4-linux-x86_64-gnu`: newest patch first."""

    def patch(path: Path) -> int:
        found = re.search(re.escape(version) + r"\.(\d+)", str(path))
        return int(found.group(1)) if found else -1

    return sorted(paths, key=patch, reverse=True)


def find_interpreter(version: str) -> str | None:
    """A working `pythonX.Y` for `version`, or None: PATH first, then pyenv, asdf and uv."""
    name = f"python{version}"
    home = Path.home()
    candidates = [Path(d) / name for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    managed = [
        (Path(os.environ.get("PYENV_ROOT", home / ".pyenv")) / "versions", f"{version}.*/bin"),
        (
            Path(os.environ.get("ASDF_DATA_DIR", home / ".asdf")) / "installs" / "python",
            f"{version}.*/bin",
        ),
        (
            Path(os.environ.get("UV_PYTHON_INSTALL_DIR", home / ".local/share/uv/python")),
            f"cpython-{version}.*/bin",
        ),
    ]
    for root, pattern in managed:
        candidates += _newest_first(list(root.glob(f"{pattern}/{name}")), version)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK) and _version_of(path) == version:
            return str(path)
    return None


def _define(version: str) -> None:
    skipped = version in os.environ.get("TETHER_MATRIX_SKIP", "").split(",")

    # virtualenv (nox's default backend) seeds pip itself: an interpreter without ensurepip
    # (Debian's, say) still gets a session. A skipped session gets no virtualenv at all.
    @nox.session(
        name=f"tests-{version}",
        python=False if skipped else find_interpreter(version) or version,
        tags=["matrix"],
    )
    def tests(session: nox.Session) -> None:
        if skipped:
            session.skip(f"the whole suite already ran on {version} (scripts/test)")
        # The fast selection needs only the test runners (`.[pytest]`); anything else asked
        # for after `--` may be the whole suite, which needs every test extra.
        extra = "test" if session.posargs else "pytest"
        session.install(
            "--disable-pip-version-check",
            "-q",
            "-e",
            f".[{extra}]",
            "--config-settings",
            "editable_mode=strict",
        )
        session.run("python", "-m", "pytest", "-q", *(session.posargs or [*FAST, "-n", "2"]))


for _version in SUPPORTED:
    _define(_version)
