"""What a tool is, what it returns, and what it may ask of its run.

A tool is any object with `name`, `description`, `input_schema`, `mutates` and an async
`run(ctx, arguments)`; one may also say `concurrent = True` when its calls may overlap with
other such calls of the same model turn (only the parent's tools do: see `loop.py`). It sees
its run only through `ToolContext` (workspace, mode, approval), so tools stay independent of
the agent loop and the wire.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

import msgspec
from msgspec import Struct, field

from tether.child.workspace import BadPath, OutsideWorkspace, Workspace
from tether.protocol.messages import Artifact, SkippedPath, ToolApproveResult


class Completion(Struct, frozen=True, kw_only=True):
    """The agent declared its task done (the `complete` tool): the run ends with this."""

    summary: str
    artifacts: list[Artifact] = field(default_factory=list)
    skipped: list[SkippedPath] = field(default_factory=list)


class ToolOutcome(Struct, frozen=True, kw_only=True):
    content: str
    """What the model reads as the tool's result."""
    is_error: bool = False
    completion: Completion | None = None
    """Set only by a tool that ends the run."""
    question: str | None = None
    """Set only by a tool that pauses a continuable run to ask its orchestrator."""
    compact: str | None = None
    """What of this result compaction keeps verbatim (a parent tool's delivery: the parent
    says what, `ToolCallResult.compact`); `None`: the result is summarised like any other."""


class ToolContext(Protocol):
    """The part of a run a tool may use."""

    @property
    def run_id(self) -> str: ...

    @property
    def workspace(self) -> Workspace: ...

    @property
    def read_only(self) -> bool:
        """Explore mode: mutation is hard-denied whatever any approval says."""
        ...

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> ToolApproveResult:
        """Ask the parent's policy before a mutating action (denied when it has none)."""
        ...

    @property
    def continuable(self) -> bool:
        """The run is kept for follow-up messages (`report` and `ask_orchestrator` exist)."""
        ...

    async def emit(self, kind: Any, data: Mapping[str, Any] | None = None) -> None:
        """Send a progress event of this run to the parent."""
        ...

    async def call_parent_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Have the parent run one of this run's parent tools."""
        ...


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    @property
    def mutates(self) -> bool:
        """Mutating tools are left out of explore-mode (read-only) runs entirely."""
        ...

    async def run(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolOutcome: ...


class ToolInputError(Exception):
    """The model's arguments do not fit the tool's input: becomes an error result, not a crash."""


A = TypeVar("A", bound=Struct)


def parse_arguments(args_type: type[A], arguments: Mapping[str, Any]) -> A:
    """Convert the model's JSON arguments into the tool's typed input struct."""
    try:
        return msgspec.convert(dict(arguments), args_type)
    except msgspec.ValidationError as exc:
        raise ToolInputError(f"invalid arguments: {exc}") from None


def schema_of(args_type: type[Struct]) -> dict[str, Any]:
    """A self-contained JSON Schema of a tool's input struct, for `ToolSpec.inputSchema`."""
    schema: dict[str, Any] = msgspec.json.schema(args_type)
    ref = schema.get("$ref", "")
    defs = schema.get("$defs", {})
    name = ref.rsplit("/", 1)[-1]
    if name in defs and len(defs) == 1:
        return dict(defs[name])
    return schema


ISOLATION_ENV = "TETHER_ISOLATION"
"""Set by the parent to the run's isolation level (`sandbox` or unset)."""
SANDBOX_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
SANDBOX_ADVICE = (
    "the sandbox allows writing only inside the workspace and its private temp directory, "
    "and no network; do not try to work around it"
)
_DENIAL_TEXT = (
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "Address family not supported",
)


def sandboxed() -> bool:
    return os.environ.get(ISOLATION_ENV) == "sandbox"


def sandbox_note(output: str) -> str:
    """A line to add to a command's output when it shows denials the sandbox may have made,
    so the model reads them as policy, not as something to retry another way."""
    if not sandboxed() or not any(t in output for t in _DENIAL_TEXT):
        return ""
    return f"\n[tether] denied by the sandbox: {SANDBOX_ADVICE}."


def refusal(path: str, exc: Exception) -> ToolOutcome:
    """The error result for a path a tool could not use, naming the reason."""
    if isinstance(exc, OutsideWorkspace | BadPath):
        return ToolOutcome(content=f"refused: {exc}", is_error=True)
    if isinstance(exc, OSError) and exc.errno in SANDBOX_ERRNOS and sandboxed():
        return ToolOutcome(
            content=f"denied by the sandbox: {path}: {exc.strerror}; {SANDBOX_ADVICE}",
            is_error=True,
        )
    if isinstance(exc, FileNotFoundError):
        return ToolOutcome(content=f"{path}: does not exist ({exc.strerror})", is_error=True)
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        return ToolOutcome(content=f"refused: {path[:80]}...: the path is too long", is_error=True)
    if isinstance(exc, OSError):
        return ToolOutcome(content=f"{path}: {exc.strerror or exc}", is_error=True)
    return ToolOutcome(content=f"{path}: {exc}", is_error=True)


def refuse_hard_links(st: os.stat_result, path: str) -> ToolOutcome | None:
    """Writing a file with more than one name changes it under every name, and another name
    may be outside the workspace (a hard link cannot be told apart from the original): such a
    file is read, never written. `None` when `st` is a file with one name."""
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        return ToolOutcome(
            content=f"refused: {path} has {st.st_nlink} hard links, and writing it would change "
            "it under every name, some possibly outside the workspace; write a new file instead",
            is_error=True,
        )
    return None


PATH_ERRORS = (OutsideWorkspace, BadPath, OSError)
"""What a file tool catches around its filesystem work and turns into `refusal(...)`."""


def looks_binary(head: bytes) -> bool:
    """A NUL byte in the first block: treat the file as binary (what grep and git do)."""
    return b"\0" in head
