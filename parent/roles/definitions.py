"""What a sub-agent is, on the parent's side: a `SubagentDefinition`, and a `Registry` of them.

A definition is the wire's `AgentDefinition` (what the child is told) plus what stays in the
parent: `provider`, the name of what runs it (`spawn`, a fresh tether child, is the default;
`runner.py` resolves the name). Keys are spelled as on the wire (camelCase), with one deliberate
rename: the step limit is `maxSteps` here, as in the task tool's world, and `maxIterations` on
the wire, where the child counts its model turns as iterations. `to_wire()` maps one onto the
other, so the wire stays as it is; definitions files refuse `maxIterations` with a pointer to
`maxSteps` rather than accepting two names for one thing.

A definition without `readOnly` is read-only: giving a sub-agent write access is a decision
someone makes, never a default (the built-in `tester` makes it, see `builtins.py`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct, field

from tether.parent.egress.policy import Destination, destination_from_table, parse_destination
from tether.parent.roles.prompts import (
    BUILD_MODE_NOTE,
    EXPLORE_MODE_NOTE,
    SUBAGENT_SYSTEM_PROMPT,
)
from tether.protocol.messages import AgentDefinition

TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
"""A type is an enum value the model writes back: a letter, then letters, digits, `_` or `-`
(at most 64 characters, the limit model APIs put on tool and enum-like names)."""
PROVIDER_PATTERN = r"^[a-z][a-z0-9_-]{0,63}$"
DEFAULT_MAX_STEPS = 20
StopCondition = Literal["no_tool_calls"]
STOP_CONDITIONS: tuple[str, ...] = StopCondition.__args__  # type: ignore[attr-defined]
NO_NESTING_TOOLS = frozenset({"task"})
"""Tools a sub-agent may never be given: delegation is the orchestrator's alone."""

Type = Annotated[str, Meta(pattern=TYPE_PATTERN)]
Provider = Annotated[str, Meta(pattern=PROVIDER_PATTERN)]
Positive = Annotated[int, Meta(ge=1)]
ToolName = Annotated[str, Meta(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")]


class SubagentDefinition(
    Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True
):
    type: Type
    description: Annotated[str, Meta(min_length=1)]
    """What the model reads to choose this type: what it is good at, in one or two sentences."""
    model: str | None = None
    max_steps: Positive = DEFAULT_MAX_STEPS
    stop_conditions: list[StopCondition] = field(default_factory=list)
    tools: list[ToolName] | None = None
    """Tool names the sub-agent may use; `None`: the runtime's full set (less what the mode
    forbids)."""
    compaction_model: str | None = None
    instructions: str = ""
    """The role's own instructions; the parent puts the sub-agent system prompt before them."""
    read_only: bool = True
    provider: Provider = "spawn"
    token_budget: Positive | None = None
    compaction_threshold: Positive | None = None
    workspace_mode: Literal["shared", "layered"] | None = None
    """`layered`: a build sub-agent of this type works in a copy-on-write layer of its own and
    returns a change set, applied by the delegation's policy (so several run in parallel);
    `shared`: in the workspace itself, one build sub-agent at a time; `None`: the
    delegation's default."""

    network: list[str | dict[str, str]] | None = None
    """What the sub-agent may reach through its run's egress proxy: `host[:ports]` entries,
    or tables `{allow = "host[:ports]", credentialEnv = "VAR"}` (`credentialHeader`,
    `credentialPrefix` optional), `[]` for none; `None` (the key left out): whatever its
    orchestration allows. Always within the orchestration's own policy: a sub-agent gets at
    most what its orchestration allows. Stays in the parent (the child is never told)."""

    def network_entries(self) -> tuple[Destination, ...] | None:
        """`network` parsed (`None`: the orchestration's policy as it is); raises
        `ValueError`."""
        if self.network is None:
            return None
        return tuple(
            parse_destination(e) if isinstance(e, str) else destination_from_table(e)
            for e in self.network
        )

    def to_wire(
        self, *, read_only: bool | None = None, system_prompt: str | None = None
    ) -> AgentDefinition:
        """The `AgentDefinition` a child runs: the mode (`read_only` overrides the definition's
        default), and the system text = sub-agent prompt + mode note + instructions."""
        ro = self.read_only if read_only is None else read_only
        prompt = SUBAGENT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        parts = [prompt, EXPLORE_MODE_NOTE if ro else BUILD_MODE_NOTE, self.instructions]
        return AgentDefinition(
            type=self.type,
            description=self.description,
            model=self.model,
            max_iterations=self.max_steps,
            stop_conditions=list(self.stop_conditions),
            tools=None if self.tools is None else list(self.tools),
            compaction_model=self.compaction_model,
            instructions="\n".join(p.strip() + "\n" for p in parts if p.strip()).rstrip("\n"),
            read_only=ro,
            token_budget=self.token_budget,
            compaction_threshold=self.compaction_threshold,
        )

    def replace(self, **changes: object) -> SubagentDefinition:
        return msgspec.structs.replace(self, **changes)


class DefinitionError(ValueError):
    """A definition (or a definitions file) is wrong; the message says where and what was
    expected. Raised before anything is spawned: the caller's data is to blame."""

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        index: int | None = None,
        type: str | None = None,
        key: str | None = None,
        table: str = "agent",
    ) -> None:
        """`table`: the kind of table `index` counts (`agent`, or `provider`)."""
        self.problem, self.file, self.index, self.type, self.key = problem, file, index, type, key
        where = []
        if file is not None:
            where.append(file)
        if index is not None:
            where.append(f"[[{table}]] #{index + 1}" + (f" ({type!r})" if type else ""))
        elif type:
            where.append(f"agent {type!r}")
        if key is not None:
            where.append(f"key {key!r}")
        super().__init__(": ".join([*where, problem]))


_AT = re.compile(r" - at `\$\.?([^`]*)`$")


def definition_from_mapping(
    table: dict[str, object], *, file: str | None = None, index: int | None = None
) -> SubagentDefinition:
    """Validate one table (keys as on the wire) into a definition, or raise `DefinitionError`
    naming the key and what it expected."""
    check_keys(table, file=file, index=index)
    name = _name(table)
    try:
        definition = msgspec.convert(table, SubagentDefinition)
    except msgspec.ValidationError as exc:
        text = str(exc)
        at = _AT.search(text)
        key = at.group(1) if at else None
        problem = text[: at.start()] if at else text
        if problem.startswith("Object missing required field"):
            key = problem.rsplit("`", 2)[-2]
            problem = "missing (required)"
        if key == "type" and "regex" in problem:
            problem = (
                f"{table.get('type')!r} is not a valid type: expected a letter, then letters, "
                "digits, '_' or '-' (at most 64 characters)"
            )
        raise DefinitionError(
            problem[0].lower() + problem[1:],
            file=file,
            index=index,
            type=name,
            key=key,
        ) from None
    nested = _nested_tools(definition)
    if nested:
        raise DefinitionError(nested, file=file, index=index, type=name, key="tools")
    try:
        definition.network_entries()
    except ValueError as exc:
        raise DefinitionError(str(exc), file=file, index=index, type=name, key="network") from None
    return definition


def check_keys(
    table: dict[str, object], *, file: str | None = None, index: int | None = None
) -> None:
    """Refuse a key that is not a definition's, with the closest known key as a hint."""
    for key in table:
        if key not in KEYS:
            raise DefinitionError(
                f"unknown key; expected one of: {', '.join(KEYS)}" + _hint(key),
                file=file,
                index=index,
                type=_name(table),
                key=key,
            )


def _name(table: dict[str, object]) -> str | None:
    name = table.get("type")
    return name if isinstance(name, str) else None


def _nested_tools(definition: SubagentDefinition) -> str | None:
    """A sub-agent given a delegation tool could spawn its own sub-agents: refused."""
    nested = NO_NESTING_TOOLS.intersection(definition.tools or ())
    if not nested:
        return None
    return f"may not include {sorted(nested)}: sub-agents cannot delegate (no nesting)"


def _hint(key: str) -> str:
    if key == "maxIterations":
        return (
            " (the step limit is spelled maxSteps in definitions; the wire calls it maxIterations)"
        )
    import difflib

    close = difflib.get_close_matches(key, KEYS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


KEYS: tuple[str, ...] = tuple(f.encode_name for f in msgspec.structs.fields(SubagentDefinition))


class Registry:
    """The definitions a task tool offers, in registration order; types are unique."""

    def __init__(self, definitions: Iterable[SubagentDefinition] = ()) -> None:
        self._defs: dict[str, SubagentDefinition] = {}
        for d in definitions:
            self.register(d)

    def register(self, definition: SubagentDefinition) -> None:
        """Add a definition; a second one of the same type, or one given a delegation tool, is
        refused with `DefinitionError`."""
        # Constructing a Struct in Python checks types but not constraints (the type pattern,
        # maxSteps >= 1): validate it the way a definitions file is validated.
        definition = definition_from_mapping(msgspec.to_builtins(definition))
        if definition.type in self._defs:
            raise DefinitionError(
                "duplicate type: each type may be defined once", type=definition.type
            )
        self._defs[definition.type] = definition

    def get(self, type: str) -> SubagentDefinition | None:
        return self._defs.get(type)

    def __getitem__(self, type: str) -> SubagentDefinition:
        return self._defs[type]

    @property
    def types(self) -> list[str]:
        return list(self._defs)

    def __iter__(self) -> Iterator[SubagentDefinition]:
        return iter(list(self._defs.values()))

    def __len__(self) -> int:
        return len(self._defs)

    def __contains__(self, type: object) -> bool:
        return type in self._defs
