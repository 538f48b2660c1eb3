"""Loading a user's own agent ("bring your own agent") from `--agent SPEC` or `TETHER_AGENT`.

SPEC names a callable, in one of two forms:

* `package.module:callable` — imported normally. The child runs with `python -I`, which
  ignores `PYTHONPATH` and the current directory, so the module must be installed in the
  child's environment (the same venv as tether);
* `/path/to/file.py:callable` — the file is loaded by path (any SPEC whose module part ends in
  `.py` or contains a `/`), which needs no installation; relative paths are taken from the
  child's working directory, so the parent should pass an absolute one.

The callable is an `runs.AgentFactory`: see `agent.py` for what it receives and returns.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from tether.child.runs import AgentFactory

ENV_VAR = "TETHER_AGENT"


class AgentSpecError(Exception):
    """The SPEC cannot be loaded; the message says why."""


def load_agent_factory(spec: str) -> AgentFactory:
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise AgentSpecError(
            f"bad agent spec {spec!r}: expected 'package.module:callable' or "
            "'/path/to/file.py:callable'"
        )
    if module_part.endswith(".py") or "/" in module_part:
        module = _load_file(Path(module_part))
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as exc:
            raise AgentSpecError(
                f"cannot import {module_part!r} for the agent: {type(exc).__name__}: {exc}"
            ) from exc
    target: Any = module
    for name in attr.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise AgentSpecError(f"{module_part!r} has no attribute {attr!r}") from None
    if not callable(target):
        raise AgentSpecError(f"{spec!r} is not callable")
    factory: AgentFactory = target
    return factory


def _load_file(path: Path) -> Any:
    path = path.resolve()
    try:
        is_file = path.is_file()
    except OSError as exc:  # a directory on the way this process may not enter
        raise AgentSpecError(
            f"the agent file {str(path)!r} cannot be read: {exc.strerror or exc}"
        ) from None
    if not is_file:
        raise AgentSpecError(f"the agent file {str(path)!r} does not exist")
    name = f"tether_user_agent_{path.stem}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise AgentSpecError(f"cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise AgentSpecError(
            f"loading the agent file {str(path)!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return module
