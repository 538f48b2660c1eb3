"""Every message of wire protocol v1 as a frozen msgspec Struct.

Python names are snake_case; on the wire every field is camelCase (`rename="camel"`). Unknown
fields are ignored so that a newer peer can add optional fields without breaking an older one.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct, field

from tether.protocol.depth import DEFAULT_MAX_MESSAGE_DEPTH
from tether.protocol.framing import DEFAULT_MAX_MESSAGE_BYTES

PROTOCOL_VERSION = 1
SUPPORTED_VERSIONS: tuple[int, ...] = (1,)


class Wire(Struct, frozen=True, rename="camel", kw_only=True):
    """Base of every payload: camelCase on the wire, immutable in Python."""


# ---------------------------------------------------------------------------------------------
# initialize


class PeerInfo(Wire, frozen=True):
    name: str
    version: str = ""


class ClientCapabilities(Wire, frozen=True):
    model_broker: bool = True
    """The parent answers `model/complete`."""
    tool_approval: bool = True
    """The parent answers `tool/approve`."""


class ServerCapabilities(Wire, frozen=True):
    agent_run: bool = True
    agent_message: bool = False
    """The child keeps continuable runs and answers `agent/message`."""
    parent_tools: bool = False
    """The child offers a run's `parentTools` to its agent and calls them with `tool/call`."""
    tools: list[str] = field(default_factory=list)


class InitializeParams(Wire, frozen=True):
    protocol_version: int
    client_info: PeerInfo
    capabilities: ClientCapabilities = field(default_factory=ClientCapabilities)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_message_depth: int = DEFAULT_MAX_MESSAGE_DEPTH
    """The deepest nesting of arrays and objects this side accepts in a line (the envelope is
    level 1); a deeper line is answered with INVALID_REQUEST."""


class InitializeResult(Wire, frozen=True):
    protocol_version: int
    server_info: PeerInfo
    pid: int
    capabilities: ServerCapabilities = field(default_factory=ServerCapabilities)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_message_depth: int = DEFAULT_MAX_MESSAGE_DEPTH
    """As in `InitializeParams`: the nesting limit of the lines this side accepts."""


class UnsupportedVersionData(Wire, frozen=True):
    """`error.data` of an UNSUPPORTED_VERSION error."""

    supported_versions: list[int]


class Empty(Wire, frozen=True):
    """Params and result of `ping`; params of `shutdown` (which answers `null`)."""


# ---------------------------------------------------------------------------------------------
# agents and runs


class AgentDefinition(Wire, frozen=True):
    type: str = "general"
    description: str = ""
    model: str | None = None
    max_iterations: int = 20
    stop_conditions: list[str] = field(default_factory=list)
    """Extra ways a run may end: `"no_tool_calls"` ends it on a turn that calls no tool."""
    tools: list[str] | None = None
    """Tool names the agent may use; `None` means the runtime's full set."""
    compaction_model: str | None = None
    instructions: str = ""
    read_only: bool = False
    token_budget: int | None = None
    """The most input + output tokens the run may use; past it the run ends `budget_exhausted`."""
    compaction_threshold: int | None = None
    """Estimated transcript tokens (chars / 4) past which old turns are summarised; `None`:
    the child's default (60 000)."""


class ToolCall(Wire, frozen=True):
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


class ChatMessage(Wire, frozen=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    """On a `tool` message: the call it answers."""


class ToolSpec(Wire, frozen=True):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)


class Usage(Wire, frozen=True):
    input_tokens: int = 0
    output_tokens: int = 0


class AgentRunParams(Wire, frozen=True):
    run_id: str
    prompt: str
    agent: AgentDefinition = field(default_factory=AgentDefinition)
    description: str = ""
    workspace: str = "."
    history: list[ChatMessage] = field(default_factory=list)
    continuable: bool = False
    parent_tools: list[ToolSpec] = field(default_factory=list)
    """Tools the parent itself serves for this run (`tool/call`), e.g. delegation's `task`; a
    child that announced `parentTools` offers them to its agent beside its own."""


class AgentMessageParams(Wire, frozen=True):
    run_id: str
    message: str


class AgentCancelParams(Wire, frozen=True):
    run_id: str
    reason: str = ""


EventKind = Literal[
    "started",
    "step",
    "text",
    "tool_call",
    "tool_result",
    "report",
    "compaction",
    "heartbeat",
]


HEARTBEAT_SECONDS = 2.0
"""How often tether's own child sends a `heartbeat` event while a model turn, an approval or a
tool call is pending. A parent's idle limit must be comfortably above it (tether's parent warns
below twice this), or every step that takes longer is cut as `unresponsive`. Children in other
languages choose their own interval."""


class AgentEventParams(Wire, frozen=True):
    run_id: str
    seq: int
    kind: EventKind
    data: dict[str, Any] = field(default_factory=dict)


class ModelCompleteParams(Wire, frozen=True):
    run_id: str
    messages: list[ChatMessage]
    model: str | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    purpose: Literal["turn", "compaction"] = "turn"


StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop"]


class ModelCompleteResult(Wire, frozen=True):
    message: ChatMessage
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = "end_turn"


class ToolCallParams(Wire, frozen=True):
    run_id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""
    """The model's id for this tool call, when it has one."""


class ToolCallResult(Wire, frozen=True):
    content: str
    """What the model reads as the tool's result."""
    is_error: bool = False
    compact: str | None = None
    """What of this result must outlive compaction of the run's transcript: the parent sets it
    on a result that delivers something (a task call's summary, status and artifacts). A child
    that compacts its transcript keeps this text, verbatim, instead of summarising the result
    away; `null`: the result is summarised like any other."""


class ToolApproveParams(Wire, frozen=True):
    run_id: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


class ToolApproveResult(Wire, frozen=True):
    allow: bool
    reason: str = ""


# ---------------------------------------------------------------------------------------------
# results

FsType = Literal["file", "directory", "symlink"]


class Artifact(Wire, frozen=True):
    path: str
    size: int
    fs_type: FsType
    modified_at: str | None = None
    in_change_set: bool = False
    """In a layered run's change set, not in the workspace until it is applied: `path` is where
    it will be, its content is the change set's (`RunResult.changes`)."""


class SkippedPath(Wire, frozen=True):
    path: str
    reason: str


SensitiveKind = Literal["added", "modified", "deleted"]


class SensitiveChange(Wire, frozen=True):
    """A change the parent saw to a file the user's own tools run on their own (a git hook,
    `.git/config`, `.envrc`, `package.json` scripts, a `Makefile`, ...; the list is in
    docs/delegation.md). Measured by the parent before and after the run, never reported by
    the child."""

    path: str
    """Relative to the workspace, `/`-separated (`.git/hooks/post-checkout`)."""
    change: SensitiveKind
    runs: str
    """What runs it, and when (`git runs it on checkout, commit, merge, ...`)."""
    fs_type: Literal["file", "symlink", "other"] | None = None
    """What is there now (`null` when deleted)."""
    size: int = 0
    executable: bool = False
    """Any execute bit is set (what git asks of a hook)."""
    content: str = ""
    """What it holds now, at most 4096 bytes of it as UTF-8 (undecodable bytes replaced):
    the part that counts for files where only a part runs (`package.json`: its `scripts`;
    `pyproject.toml`: its build hooks), a symbolic link's target, `(binary, N bytes)` for a
    file with NUL bytes; empty when deleted or past the result's 64 KiB of contents."""
    truncated: bool = False
    """`content` is not all of it."""


FailureKind = Literal[
    "crashed",
    "exit_nonzero",
    "killed",
    "timeout",
    "unresponsive",
    "oom",
    "cpu_limit",
    "fsize_limit",
    "tasks_limit",
    "protocol",
    "oversize",
    "spawn_failed",
    "cancelled",
    "budget_exhausted",
    "agent_error",
    "placement_lost",
    "net_limit",
    "changes_too_large",
    "parent_error",
]
FAILURE_KINDS: tuple[str, ...] = FailureKind.__args__  # type: ignore[attr-defined]

Rung = Literal["none", "shutdown", "exit", "sigterm", "sigkill"]
RUNGS: tuple[str, ...] = Rung.__args__  # type: ignore[attr-defined]


class Failure(Wire, frozen=True):
    kind: FailureKind
    exit_code: int | None = None
    signal: str | None = None
    """Signal name (`"SIGSEGV"`) when the child died by a signal."""
    rung: Rung | None = None
    """The last dispose rung that was needed to take the child down."""
    limit: str | None = None
    """The limit that was hit (`"wall=30s"`), for limit kinds."""
    stderr_tail: str = ""


WorkspaceMode = Literal["shared", "layered"]
"""`shared`: the child works in the workspace itself. `layered`: it sees the workspace through
a copy-on-write layer of its own; what it changes stays there, and the parent returns it as a
change set (`RunResult.changes`), applied to the workspace only on decision."""
WORKSPACE_MODES: tuple[str, ...] = WorkspaceMode.__args__  # type: ignore[attr-defined]

LayerMethod = Literal["overlay", "overlay-userns", "reflink", "copy"]
"""How a layer is made: an overlay mount in the child's private mount namespace (a root
supervisor), an overlay in a user namespace of the child's own (without root, where the kernel
allows it), a reflink copy of the workspace (`FICLONE`), or a plain copy, bounded in size."""

ApplyPolicy = Literal["never", "on_success", "on_verified"]
"""When a layered run's change set is applied to the workspace: `never` (returned only, applied
later by `Supervisor.apply` or `tether apply`), `on_success` (when the run succeeded),
`on_verified` (after a verifier's PASS)."""
APPLY_POLICIES: tuple[str, ...] = ApplyPolicy.__args__  # type: ignore[attr-defined]

ChangeKind = Literal["added", "modified", "deleted", "renamed"]


class FileChange(Wire, frozen=True, omit_defaults=True):
    """One path a layered run changed, measured by the parent against the layer's base."""

    path: str
    """Relative to the workspace, `/`-separated."""
    change: ChangeKind
    fs_type: Literal["file", "directory", "symlink"]
    """What it is in the layer (for `deleted`: what it was in the base)."""
    base_fs_type: Literal["file", "directory", "symlink"] | None = None
    """What it was in the base (`null` when added)."""
    old_path: str | None = None
    """`renamed`: where it was in the base (same content, same type)."""
    mode: int | None = None
    """Permission bits in the layer (`null` when deleted); setuid, setgid and sticky bits are
    never carried."""
    base_mode: int | None = None
    """Permission bits in the base (`null` when added)."""
    target: str | None = None
    """A symbolic link's target in the layer."""
    base_target: str | None = None
    size: int = 0
    """Bytes in the layer (a file's content, a link's target)."""
    sha256: str | None = None
    """A file's content in the layer."""
    base_sha256: str | None = None
    """A file's content in the base, as the parent read it when the change set was computed
    (`null` when added, or when the workspace had already changed: a conflict)."""
    binary: bool = False
    """Not UTF-8 text (or a NUL byte in it): no diff, size and hash only."""
    diff: str | None = None
    """A unified diff, base to layer, for a text file (`null` past the diff limits; `note`
    says so)."""
    runs: str | None = None
    """A file the user's own tools run on their own (a Makefile, `.envrc`, ...): what runs it."""
    note: str = ""


class ChangeSet(Wire, frozen=True):
    """What a layered run changed, computed by the parent from the layer, never reported by the
    child; applied to the workspace only on decision (`ApplyPolicy`)."""

    workspace: str
    """The workspace the layer's base is (absolute)."""
    layer: str
    """The layer's directory, kept by the parent until the change set is applied or
    discarded (`null`-like empty once discarded)."""
    method: LayerMethod
    changes: list[FileChange] = field(default_factory=list)
    refused: list[SkippedPath] = field(default_factory=list)
    """Entries of the layer the parent refused, each with why: a device node, a link out of
    the workspace, a hard link to a file outside the layer, the repository's `.git`."""
    files: int = 0
    """Changed paths."""
    bytes: int = 0
    """Content bytes the changed files and links hold in the layer."""


class Conflict(Wire, frozen=True):
    """A path the change set changes that changed in the workspace since the layer's base."""

    path: str
    reason: str
    workspace: str = ""
    """What the workspace holds there now (text, or a description for binary content)."""
    layer: str = ""
    """What the layer holds there."""


ApplyState = Literal["applied", "conflict", "not_applied", "failed", "discarded"]


class ApplyOutcome(Wire, frozen=True):
    """What became of a layered run's change set."""

    state: ApplyState
    """`applied`: every change is in the workspace (each file replaced atomically);
    `conflict`: refused, nothing applied (`conflicts`); `not_applied`: kept, not applied (the
    policy, or the run did not succeed); `failed`: an error while applying, every change
    already made undone; `discarded`: the layer was thrown away."""
    policy: ApplyPolicy = "never"
    message: str = ""
    conflicts: list[Conflict] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    """The paths written or removed (`applied`)."""


class Attempts(Wire, frozen=True):
    """Several attempts at one task, each in its own layer: which one was taken and why."""

    taken: int | None
    """The attempt taken (1-based), `null` when none was."""
    why: str
    results: list[RunResult] = field(default_factory=list)
    """Every attempt's result, its change set included, in attempt order."""


RunStatus = Literal["completed", "aborted", "error", "needs_input"]
"""`needs_input`: a continuable run paused to ask its orchestrator `question`; an answer
(`agent/message`) continues it."""

IsolationLevel = Literal["sandbox", "process", "none"]


class NetDenial(Wire, frozen=True):
    """One request the run's egress proxy refused."""

    host: str
    port: int
    reason: str


class NetworkReport(Wire, frozen=True):
    """A run's network: its policy, and what its egress proxy let through and refused (filled
    in by the parent; the counts so far, for a continuable run's follow-up)."""

    policy: Literal["none", "allowlist"] = "none"
    """`none`: no network at all (the default); `allowlist`: the destinations in `allow`,
    through the run's egress proxy in the parent."""
    allow: list[str] = field(default_factory=list)
    """The allowlist, `host:ports` each (a credential's header and variable named, never its
    value; `within ...` for an orchestration's bound)."""
    enforced: Literal["namespace", "port", "none"] | None = None
    """How the child was kept to the proxy: `namespace` (a private network namespace whose
    one listener is the proxy's: a root supervisor), `port` (Landlock lets it connect to the
    proxy's port only, on any address: no root), `none` (process level: the proxy is offered,
    nothing keeps the child to it)."""
    allowed: int = 0
    """Tunnels and requests relayed."""
    denied: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    denials: list[NetDenial] = field(default_factory=list)
    """The first 16 refusals (every one is a `net.denied` event)."""
    limits_hit: list[str] = field(default_factory=list)
    """The run's network limits it reached (`net_connections=32`: a connection refused;
    `net_bytes_down=...`: the run ended as `net_limit`)."""


class Isolation(Wire, frozen=True):
    """How the parent isolated a run's child (filled in by the parent)."""

    level: IsolationLevel
    """`sandbox` (Landlock, seccomp, no_new_privs; an unprivileged uid when the supervisor is
    root), `process` (environment scrub, session, limits and containment tier only), or
    `none`: the run was served inside the parent's own process (the `inprocess` provider),
    with no process isolation at all; `warning` says so."""
    landlock_abi: int | None = None
    """The Landlock ABI the child's domain was built for (`sandbox` only)."""
    warning: str | None = None
    """Why the level is weaker than `sandbox`, when `auto` had to settle for less, or the run
    had none."""
    network: NetworkReport = field(default_factory=NetworkReport)
    """The run's network policy and what its egress proxy did."""


class StopReceipt(Wire, frozen=True):
    """What the parent measured when it stopped a run — and, for an orchestrator, the whole
    tree of sub-agents it started (filled in by the parent, never by a child)."""

    reason: str
    """Why it was stopped (`interrupted`, `cancelled by the parent`, ...)."""
    asked_at: float
    """When the stop was asked (Unix seconds)."""
    gone_at: float
    """When everything was gone: the final sweep found nothing of any stopped child's tree
    alive (Unix seconds; if it found something, when it looked)."""
    seconds: float
    """From the ask to everything gone, on the monotonic clock."""
    rung: Rung
    """The furthest rung the dispose ladder reached over every stopped child."""
    runs: int
    """Runs the stop took down: the run itself and, for an orchestrator, every sub-agent run of
    its tree not yet over when the stop was asked (or started after it)."""
    processes_left: int
    """Processes of any stopped child's tree alive after the final sweep (a fresh snapshot of
    /proc: each child's session, process group, tree marker and cgroup). Should be 0."""
    turns_after_stop: int
    """Model turns admitted after the stop was asked: the parent's brokers refuse every request
    from that instant. Should be 0."""
    turns_abandoned: int
    """Model turns in flight when the stop was asked: cancelled there, their answers never
    delivered and their tokens not billed."""
    tokens_after_stop: int
    """Tokens billed (counted into the runs' usage) after the stop was asked. Should be 0."""


class TraceReport(Wire, frozen=True):
    """Where the parent traced a run (filled in by the parent; docs/traces.md)."""

    path: str
    """The run's trace file (JSON Lines)."""
    bytes: int = 0
    """The file's size when the result was built."""
    stopped: str | None = None
    """Why tracing of the run stopped before its end (its size limit, a disk that fell
    behind, a file that could not be written); `null` when it did not."""


class RunResult(Wire, frozen=True):
    success: bool
    status: RunStatus
    summary: str = ""
    message: str = ""
    """Why the run ended, in one sentence a person can act on."""
    artifacts: list[Artifact] = field(default_factory=list)
    skipped: list[SkippedPath] = field(default_factory=list)
    turn_count: int = 0
    iteration_count: int = 0
    usage: Usage = field(default_factory=Usage)
    verdict: Literal["PASS", "FAIL", "PARTIAL"] | None = None
    failure: Failure | None = None
    run_id: str = ""
    containment: str | None = None
    """The containment tier the parent ran this child under (filled in by the parent)."""
    question: str | None = None
    """With `status: "needs_input"`: what the run asks before it can go on."""
    isolation: Isolation | None = None
    """The isolation level the parent ran this child under (filled in by the parent)."""
    launcher: str | None = None
    """The launcher the child's command ran under (`local`, `bwrap`, `ssh:HOST`, ...; filled in
    by the parent)."""
    pid: int | None = None
    """The child's process id as the parent saw it (for a remote launcher: the local client's;
    filled in by the parent, `null` when no process was started)."""
    duration_seconds: float | None = None
    """Seconds from the run's start (or a follow-up's) to its result, the child's teardown
    included when the run is not continuable (filled in by the parent)."""
    sensitive_changes: list[SensitiveChange] = field(default_factory=list)
    """Files the user's own tools run on their own that changed in the workspace while the run
    (or this follow-up) ran, as the parent saw them (filled in by the parent; another run
    sharing the workspace at the same time shows up here too; a layered run: those among its
    change set)."""
    workspace_mode: WorkspaceMode = "shared"
    """How the child saw the workspace (filled in by the parent)."""
    changes: ChangeSet | None = None
    """A layered run's change set (filled in by the parent; `null` for a shared run)."""
    applied: ApplyOutcome | None = None
    """What became of the change set (a layered run)."""
    attempts: Attempts | None = None
    """With several attempts at the task: each one's result, and which was taken."""
    trace: TraceReport | None = None
    """The run's trace, when the parent traced it (filled in by the parent)."""
    stop: StopReceipt | None = None
    """When the run was stopped (cancelled, aborted, its supervisor closing): what the parent
    measured of the stop (filled in by the parent)."""
