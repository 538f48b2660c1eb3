"""tether: run each sub-agent as a supervised child process on a JSON-RPC tether.

The names a user needs, in one place::

    import tether

    async with tether.Supervisor() as sup:
        result = await sup.run("Summarize the TODOs", agent="explorer", workspace=".",
                               model="scripted:examples/explorer.json",
                               limits=tether.Limits(wall="60s"))

A program that runs sub-agents soon after it starts calls `tether.prelaunch()` as its first
line, before its imports: the zygote that forks the children then imports the child runtime
while the program imports the rest (standard library alone until then).

Every name here is loaded on first use, so `import tether` costs nothing (the trampoline that
starts each child imports `tether.contain` with the standard library alone, through this
package). The public modules besides this one: `tether.console` (the CLI's renderings, for a
program of your own), `tether.protocol` (the wire contract: message types, codec, schema),
`tether.child.agent` (writing an agent tether's child hosts), and for everything else
`tether.parent` and `tether.parent.delegation` (their `__all__`). Any other module path is
internal and may change between releases; a test keeps `examples/` and `docs/` to these.
"""

# Nothing is imported here, not even `typing`: every child's trampoline imports this package
# on its way to `tether.contain` (a test lists what it imports before it execs).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from tether._about import __version__
    from tether.parent.agents.service import AgentBusy, AgentHandle, CannotResume
    from tether.parent.delegation.ledger import Ledger
    from tether.parent.delegation.orchestrator import Orchestration
    from tether.parent.delegation.output import TaskOutput
    from tether.parent.delegation.verification import VerifierPolicy
    from tether.parent.egress.policy import Credential, NetworkPolicy
    from tether.parent.egress.seat import EgressOptions
    from tether.parent.models import ModelProvider, resolve_model
    from tether.parent.models.replay import TraceModel
    from tether.parent.models.scripted import ScriptedModel
    from tether.parent.placement.rayplacement import RayPlacement
    from tether.parent.process.config import ChildConfig, PoolSpec
    from tether.parent.process.early import prelaunch
    from tether.parent.process.layers import LayerLimits
    from tether.parent.process.limits import DisposePolicy, Limits
    from tether.parent.roles.builtins import role
    from tether.parent.roles.definitions import Registry, SubagentDefinition
    from tether.parent.run.events import ChildEvent, Event, RunFinished, RunStarted
    from tether.parent.run.handle import RunHandle
    from tether.parent.run.spec import Continuation, NamedModel, RunSpec
    from tether.parent.supervisor import Supervisor
    from tether.parent.trace.reader import read_trace
    from tether.parent.trace.spec import TraceSpec
    from tether.protocol.messages import AgentDefinition, ApplyOutcome, ChangeSet, RunResult

_LAZY = {
    # the installed distribution's version (a test keeps them equal)
    "__version__": "tether._about",
    # running sub-agents
    "Supervisor": "tether.parent.supervisor",
    "RunSpec": "tether.parent.run.spec",
    "RunHandle": "tether.parent.run.handle",
    "RunResult": "tether.protocol.messages",
    "Limits": "tether.parent.process.limits",
    "DisposePolicy": "tether.parent.process.limits",
    "ChildConfig": "tether.parent.process.config",
    "PoolSpec": "tether.parent.process.config",
    "Continuation": "tether.parent.run.spec",
    # the zygote launched before the program's own imports (the standard library alone)
    "prelaunch": "tether.parent.process.early",
    # network by policy
    "NetworkPolicy": "tether.parent.egress.policy",
    "Credential": "tether.parent.egress.policy",
    "EgressOptions": "tether.parent.egress.seat",
    # what a run tells its listeners
    "Event": "tether.parent.run.events",
    "RunStarted": "tether.parent.run.events",
    "ChildEvent": "tether.parent.run.events",
    "RunFinished": "tether.parent.run.events",
    # models, decided by the parent
    "ModelProvider": "tether.parent.models",
    "ScriptedModel": "tether.parent.models.scripted",
    "NamedModel": "tether.parent.run.spec",
    "resolve_model": "tether.parent.models",
    # agents and roles
    "AgentDefinition": "tether.protocol.messages",
    "SubagentDefinition": "tether.parent.roles.definitions",
    "Registry": "tether.parent.roles.definitions",
    "role": "tether.parent.roles.builtins",
    # continuable agents
    "AgentHandle": "tether.parent.agents.service",
    "AgentBusy": "tether.parent.agents.service",
    "CannotResume": "tether.parent.agents.service",
    # delegation
    "Orchestration": "tether.parent.delegation.orchestrator",
    "TaskOutput": "tether.parent.delegation.output",
    "Ledger": "tether.parent.delegation.ledger",
    "VerifierPolicy": "tether.parent.delegation.verification",
    # layered workspaces
    "ChangeSet": "tether.protocol.messages",
    "ApplyOutcome": "tether.protocol.messages",
    "LayerLimits": "tether.parent.process.layers",
    # traces and their replay
    "TraceSpec": "tether.parent.trace.spec",
    "read_trace": "tether.parent.trace.reader",
    "TraceModel": "tether.parent.models.replay",
    # scale-out (the `ray` extra)
    "RayPlacement": "tether.parent.placement.rayplacement",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AgentBusy",
    "AgentDefinition",
    "AgentHandle",
    "ApplyOutcome",
    "CannotResume",
    "ChangeSet",
    "ChildConfig",
    "ChildEvent",
    "Continuation",
    "Credential",
    "DisposePolicy",
    "EgressOptions",
    "Event",
    "LayerLimits",
    "Ledger",
    "Limits",
    "ModelProvider",
    "NamedModel",
    "NetworkPolicy",
    "Orchestration",
    "PoolSpec",
    "RayPlacement",
    "Registry",
    "RunFinished",
    "RunHandle",
    "RunResult",
    "RunSpec",
    "RunStarted",
    "ScriptedModel",
    "SubagentDefinition",
    "Supervisor",
    "TaskOutput",
    "TraceModel",
    "TraceSpec",
    "VerifierPolicy",
    "__version__",
    "prelaunch",
    "read_trace",
    "resolve_model",
    "role",
]
