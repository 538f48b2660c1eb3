"""pyproject claims exactly the interpreters the test matrix (noxfile.py) runs, and the matrix
finds an interpreter the way it says it does."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tether_noxfile", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def noxfile() -> ModuleType:
    return _noxfile()


@pytest.fixture(scope="module")
def project() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        table: dict[str, object] = tomllib.load(f)["project"]
    return table


def test_the_classifiers_name_exactly_the_versions_the_matrix_tests(
    noxfile: ModuleType, project: dict[str, object]
) -> None:
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    python = [c for c in classifiers if c.startswith("Programming Language :: Python")]
    versions = [c.rsplit(" :: ", 1)[1] for c in python if re.fullmatch(r".* :: 3\.\d+", c)]
    assert versions == list(noxfile.SUPPORTED)
    assert set(python) == {
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        *(f"Programming Language :: Python :: {v}" for v in noxfile.SUPPORTED),
    }


def test_requires_python_starts_at_the_oldest_tested_version(
    noxfile: ModuleType, project: dict[str, object]
) -> None:
    assert project["requires-python"] == f">={noxfile.SUPPORTED[0]}"


def test_this_interpreter_is_one_the_matrix_supports(noxfile: ModuleType) -> None:
    assert f"{sys.version_info[0]}.{sys.version_info[1]}" in noxfile.SUPPORTED


def test_the_matrix_finds_an_interpreter_of_this_version_and_checks_what_it_runs(
    noxfile: ModuleType,
) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    found = noxfile.find_interpreter(version)
    assert found is not None
    assert noxfile._version_of(Path(found)) == version


def test_a_version_with_no_interpreter_is_not_found(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shim that answers for the wrong version (as a pyenv shim for an inactive one would
    # fail) must not count as the interpreter.
    shim = tmp_path / "python3.99"
    shim.write_text("#!/bin/sh\necho 3.11\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    for manager in ("PYENV_ROOT", "ASDF_DATA_DIR", "UV_PYTHON_INSTALL_DIR"):
        monkeypatch.setenv(manager, str(tmp_path / "none"))
    assert noxfile.find_interpreter("3.99") is None


def test_the_matrix_looks_in_the_version_managers_folders(
    noxfile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    managed = tmp_path / "pyenv" / "versions" / f"{version}.99" / "bin"
    managed.mkdir(parents=True)
    (managed / f"python{version}").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    assert noxfile.find_interpreter(version) == str(managed / f"python{version}")


def test_there_is_one_matrix_session_per_supported_version(noxfile: ModuleType) -> None:
    import nox.registry

    names = {name for name, func in nox.registry.get().items() if "matrix" in func.tags}
    assert {f"tests-{v}" for v in noxfile.SUPPORTED} <= names
