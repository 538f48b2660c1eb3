"""The model-facing task tool: its schema, built from the registered definitions, and the
validation of a model's arguments against that very schema.

`task_tool(definitions)` returns `None` when there are no definitions: no tool at all, so an
orchestrator's model never sees a tool it could not use. `agent_types` (provider names, with
a line each saying what it is) adds the optional `agentType` argument, which overrides the
sub-agent type's provider for one call; with fewer than two there is no choice to make, and no
such argument. The schema is one JSON Schema object
(`input_schema`); `json_schema()`, `openai()`, `openai_responses()` and `anthropic()` wrap it
for whoever hands it to a model. Arguments are validated by tether (model APIs and MCP servers
do not guarantee it): every problem comes back as a `TaskOutput` with `status: "error"` naming
the argument, never as an exception.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import jsonschema
from msgspec import Struct

from tether.parent.delegation.output import ArgumentProblem, TaskOutput, refused
from tether.parent.roles.definitions import Registry, SubagentDefinition
from tether.parent.run.attempts import MAX_ATTEMPTS

if TYPE_CHECKING:
    from tether.parent.run.provider import Provider

TOOL_NAME = "task"
LABEL_MAX_CHARS = 80
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

GUIDANCE = """\
Start a sub-agent: a separate agent with a fresh context, its own tools and step limit, \
working in the same workspace as you. It works on its own and returns a summary plus the \
paths of the files it delivered; you never see its intermediate steps. Several task calls in \
one turn run in parallel.

When to delegate:
- work with many steps that would fill your context (surveying a codebase, reading many files);
- independent pieces of work that can run side by side (one call each, in the same turn);
- a change that should be tested or reviewed by someone other than its author.

When not to:
- anything a few tool calls of your own would do: delegation costs a whole agent run;
- work that only you can do because it needs this conversation, unless you fork your context;
- splitting a task whose parts depend on each other step by step.

A good prompt is self-contained: the goal; all the context the sub-agent needs (it has not \
seen this conversation: name files, decisions, constraints); what to deliver and where (file \
names, so that parallel sub-agents do not write to the same file); and the scope (what not to \
touch, when to stop).
A bad prompt is vague ("look into the bug"), points at things the sub-agent cannot see ("as \
discussed", "the file from before"), or does not say what to deliver.

With layered workspaces, build sub-agents each work in a copy-on-write layer of their own \
and run side by side; what each changed comes back as `changes` and is applied to the \
workspace as the delegation's policy says (`applied`). Two that change the same file: the \
first applied wins, the second comes back with `status: "conflict"` and both sides of each \
conflict, to redo on the workspace as it is now.

Read the result: only `status: "completed"` means the work is done; read the artifacts when \
you need their content. A change touching several files is checked by a verifier, whose verdict \
comes back in `verification`; so is any change to a file the user's own tools run (git hooks and \
config, .envrc, package.json scripts, a Makefile, ...), listed in `sensitiveChanges`: tell the \
user about those."""


class TaskRequest(Struct, frozen=True, kw_only=True):
    """A task call's arguments, validated."""

    subagent_type: str
    description: str
    prompt: str
    read_only: bool | None = None
    fork_context: bool = False
    agent_type: str | None = None
    attempts: int = 1


class TaskTool:
    """The task tool over a registry of definitions (see the module docstring)."""

    def __init__(
        self,
        definitions: Registry,
        *,
        name: str = TOOL_NAME,
        agent_types: Mapping[str, str] | None = None,
    ) -> None:
        if len(definitions) == 0:
            raise ValueError("a task tool needs at least one definition (see task_tool())")
        self.name = name
        self.definitions = definitions
        self.description = GUIDANCE
        self.agent_types = dict(agent_types or {}) if len(agent_types or {}) >= 2 else {}
        """Provider names the model may pick with `agentType`, each with what it is."""
        self.input_schema = _input_schema(definitions, self.agent_types)
        self._validator = jsonschema.Draft202012Validator(self.input_schema)

    # --- formats ------------------------------------------------------------------------------

    def json_schema(self) -> dict[str, Any]:
        """A standalone JSON Schema document: the input schema, titled with the tool's name and
        described by its guidance."""
        return {
            "$schema": JSON_SCHEMA_DIALECT,
            "title": self.name,
            "description": self.description,
            **self.input_schema,
        }

    def openai(self) -> dict[str, Any]:
        """OpenAI Chat Completions `tools[]` entry. `strict` is off: strict mode needs every
        property required, and `readOnly` / `forkContext` are optional."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
                "strict": False,
            },
        }

    def openai_responses(self) -> dict[str, Any]:
        """OpenAI Responses API `tools[]` entry (flat; `strict` defaults to true there, so it is
        turned off explicitly, for the same reason as in `openai()`)."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.input_schema,
            "strict": False,
        }

    def anthropic(self) -> dict[str, Any]:
        """Anthropic Messages API `tools[]` entry."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }

    def export(self, format: str) -> dict[str, Any]:
        try:
            return FORMATS[format](self)
        except KeyError:
            raise ValueError(
                f"unknown format {format!r}; expected one of: {', '.join(FORMATS)}"
            ) from None

    # --- validation ---------------------------------------------------------------------------

    def validate(self, arguments: object) -> TaskRequest | TaskOutput:
        """The request, or a refusal (`status: "error"`) listing every problem by argument.
        `arguments` is the decoded object, or the JSON text some APIs deliver."""
        if isinstance(arguments, str | bytes):
            try:
                arguments = json.loads(arguments)
            except ValueError as exc:
                return _invalid([ArgumentProblem(argument="", problem=f"not valid JSON: {exc}")])
        if not isinstance(arguments, dict):
            return _invalid(
                [ArgumentProblem(argument="", problem="the arguments must be a JSON object")]
            )
        problems = self._problems(arguments)
        if problems:
            return _invalid(problems)
        return TaskRequest(
            subagent_type=arguments["subagent_type"],
            description=arguments["description"],
            prompt=arguments["prompt"],
            read_only=arguments.get("readOnly"),
            fork_context=bool(arguments.get("forkContext", False)),
            agent_type=arguments.get("agentType"),
            attempts=int(arguments.get("attempts", 1)),
        )

    def _problems(self, arguments: dict[str, Any]) -> list[ArgumentProblem]:
        """One problem per argument (a wrong type before anything else: a number is not "an
        unknown type", it is not a string), in the schema's order of arguments."""
        errors = sorted(
            self._validator.iter_errors(arguments),
            key=lambda e: ([str(p) for p in e.path], e.validator != "type"),
        )
        problems: dict[str, ArgumentProblem] = {}
        for error in errors:
            for problem in self._explain(error, arguments):
                problems.setdefault(problem.argument, problem)
        order = list(self.input_schema["properties"])
        return sorted(
            problems.values(),
            key=lambda p: order.index(p.argument) if p.argument in order else len(order),
        )

    def _explain(
        self, error: jsonschema.ValidationError, arguments: dict[str, Any]
    ) -> list[ArgumentProblem]:
        props = self.input_schema["properties"]
        if error.validator == "required":
            return [
                ArgumentProblem(argument=name, problem="missing (required)")
                for name in self.input_schema["required"]
                if name not in arguments
            ]
        if error.validator == "additionalProperties":
            return [
                ArgumentProblem(
                    argument=name,
                    problem=f"unknown argument; the arguments are: {', '.join(props)}",
                )
                for name in arguments
                if name not in props
            ]
        argument = str(error.path[0]) if error.path else ""
        value: Any = error.instance
        if error.validator == "type":
            return [
                ArgumentProblem(
                    argument=argument,
                    problem=f"expected {_a(error.validator_value)}, got {_json_type(value)}",
                )
            ]
        if error.validator == "enum" and argument == "agentType":
            return [
                ArgumentProblem(
                    argument=argument,
                    problem=f"unknown agent type {_preview(value)}; available: "
                    f"{', '.join(self.agent_types)}",
                )
            ]
        if error.validator == "enum":
            return [
                ArgumentProblem(
                    argument=argument,
                    problem=f"unknown sub-agent type {_preview(value)}; available: "
                    f"{', '.join(self.definitions.types)}",
                )
            ]
        if error.validator == "maxLength":
            return [
                ArgumentProblem(
                    argument=argument,
                    problem=f"{len(value)} characters, at most {error.validator_value} allowed "
                    "(a short label; put the task itself in `prompt`)",
                )
            ]
        if error.validator in ("minLength", "pattern"):
            return [ArgumentProblem(argument=argument, problem="must not be empty or blank")]
        if error.validator in ("minimum", "maximum"):
            return [
                ArgumentProblem(
                    argument=argument, problem=f"must be from 1 to {MAX_ATTEMPTS}, got {value!r}"
                )
            ]
        return [ArgumentProblem(argument=argument, problem=error.message)]


FORMATS = {
    "json-schema": TaskTool.json_schema,
    "openai": TaskTool.openai,
    "openai-responses": TaskTool.openai_responses,
    "anthropic": TaskTool.anthropic,
}


def offered_agent_types(
    providers: Iterable[Provider], *, caller_turns: bool = True
) -> dict[str, str]:
    """The providers a model may pick per task call (`agentType`), each with what it is: those
    that run out of the parent's process and can run here. `inprocess` never (it has no
    isolation); with `caller_turns=False` (the caller's transcript is not the parent's: an MCP
    client) none that starts from the caller's turns (`fork`). The task tool offers the
    argument when two or more remain (`tether orchestrate`, `tether mcp`, `tether
    task-schema`, `SupervisorRunner.agent_types`)."""
    out: dict[str, str] = {}
    for provider in providers:
        if not provider.isolated or (provider.from_caller_turns and not caller_turns):
            continue
        try:
            if provider.problem(None) is not None:
                continue
        except Exception:  # a user's provider must not break the listing
            continue
        out[provider.name] = provider.summary or provider.name
    return out


def task_tool(
    definitions: Registry | Iterable[SubagentDefinition],
    *,
    agent_types: Mapping[str, str] | None = None,
) -> TaskTool | None:
    """The task tool for these definitions, or `None` when there are none (no tool at all)."""
    registry = definitions if isinstance(definitions, Registry) else Registry(definitions)
    if len(registry) == 0:
        return None
    return TaskTool(registry, agent_types=agent_types)


def _input_schema(definitions: Registry, agent_types: Mapping[str, str]) -> dict[str, Any]:
    listing = "\n".join(
        f"- {d.type} ({'read-only' if d.read_only else 'build mode'} by default): {d.description}"
        for d in definitions
    )
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "subagent_type": {
                "type": "string",
                "enum": definitions.types,
                "description": f"The kind of sub-agent to start. Available types:\n{listing}",
            },
            "description": {
                "type": "string",
                "minLength": 1,
                "maxLength": LABEL_MAX_CHARS,
                "pattern": r"\S",
                "description": "A short label (3-7 words) shown in progress views and the usage "
                "ledger. Not the task itself.",
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "pattern": r"\S",
                "description": "The self-contained delegation the sub-agent receives as its "
                "task: the goal, all the context it needs (it has not seen this conversation), "
                "the files to deliver, and the scope.",
            },
            "readOnly": {
                "type": "boolean",
                "description": "Overrides the type's default mode: true runs it read-only "
                "(explore mode: it cannot change files or run commands), false lets it change "
                "the workspace (build mode). Omit it to keep the type's default.",
            },
            "forkContext": {
                "type": "boolean",
                "default": False,
                "description": "true: the sub-agent starts with your conversation so far (your "
                "completed turns) before the prompt, for continuing work you already have "
                "context for. false (default): it sees only the prompt, which is cheaper and "
                "keeps it from inheriting your assumptions.",
            },
            "attempts": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_ATTEMPTS,
                "default": 1,
                "description": "Build-mode tasks only: start this many sub-agents on the same "
                "prompt at once, each in a copy-on-write layer of its own; the first whose "
                "change passes the verifier is applied to the workspace and the others are "
                "discarded. The result says which attempt was taken and why, and lists each "
                "one. Worth it for a fix that may go several ways; costs a run per attempt.",
            },
        },
        "required": ["subagent_type", "description", "prompt"],
        "additionalProperties": False,
    }
    if agent_types:
        kinds = "\n".join(f"- {name}: {what}" for name, what in agent_types.items())
        schema["properties"]["agentType"] = {
            "type": "string",
            "enum": list(agent_types),
            "description": "Overrides how the sub-agent is run (its provider) for this call; "
            f"omit it to keep the type's own. Available:\n{kinds}",
        }
    return schema


def _invalid(problems: list[ArgumentProblem]) -> TaskOutput:
    text = "; ".join(f"{p.argument or 'arguments'}: {p.problem}" for p in problems)
    return refused("invalid_arguments", f"Invalid arguments: {text}.", problems)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _a(type_name: object) -> str:
    return {"string": "a string", "boolean": "a boolean", "object": "an object"}.get(
        str(type_name), str(type_name)
    )


def _preview(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
