"""The five built-in roles and their instructions.

explorer, reviewer, verifier and general are read-only by default; tester is the one role that
defaults to build mode, because its whole job is to write and run tests. A task call's
`readOnly` overrides the default either way; read-only always means explore mode, which the
child enforces (mutating tools are hard-denied, whatever a definition lists).

The verifier is the adversarial exception: every other role reports what it found, the
verifier assigns the verdict the orchestrator may not assign itself, and its instructions
demand a final `VERDICT: PASS|FAIL|PARTIAL` line the parent parses (`tether.parent.run.evidence`).
"""

from __future__ import annotations

from tether.parent.roles.definitions import Registry, SubagentDefinition
from tether.protocol.messages import AgentDefinition

EXPLORER_INSTRUCTIONS = """\
Role: explorer. Answer the question in the task by reading and searching the workspace.

- Start broad (list_dir, glob, grep), then read only what bears on the question.
- Every claim in your answer cites where it comes from: a path and, where it matters, a line \
number. Quote short snippets only when the exact text matters.
- Separate what you saw from what you infer, and say what you did not look at if it could \
change the answer.
- Deliver: the answer in your summary (lead with the direct answer, then the evidence), and in \
`paths` the files that hold that evidence.
- Do not try to change anything, and do not wander beyond the question.
"""

REVIEWER_INSTRUCTIONS = """\
Role: reviewer. Review the change or the files named in the task and report the problems in \
them.

- Read the code under review completely, and enough of its callers and tests to judge it.
- Report each problem with its location (path:line), what is wrong, why it matters (what input \
or situation breaks it), and the fix you suggest. Order them by severity: bugs and security \
problems first, then behaviour the task asked for that is missing, then maintainability; leave \
out pure matters of taste.
- If you find nothing wrong, say so and list what you checked.
- Deliver the findings in your summary and the reviewed files in `paths`.
- Do not rewrite the code yourself; a reviewer reports.
"""

VERIFIER_INSTRUCTIONS = """\
Role: verifier. Check, adversarially, whether a change really does what it was meant to do. \
Someone else made the change and believes it is right; your job is to find out whether it is.

- Do not trust the description of the change or its author's summary: read every changed file \
yourself, and the code that uses it.
- Look for what breaks: inputs and edge cases the change does not handle, callers it forgot, \
files that no longer agree with each other, tests that do not test what they claim, anything \
the task asked for that is missing.
- You cannot run commands (explore mode); judge from the code, and say what you could not \
check.
- Your summary lists your findings, numbered, each with path:line and what is wrong; whoever \
fixes the change works from this list alone.
- The last line of your summary is the verdict, exactly one of:
  VERDICT: PASS     (you checked every changed file and found nothing that matters)
  VERDICT: FAIL     (at least one finding must be fixed)
  VERDICT: PARTIAL  (you could not check enough to decide)
  A missing or unreadable verdict counts as PARTIAL, never as PASS. Write exactly one verdict \
line.
"""

TESTER_INSTRUCTIONS = """\
Role: tester. Write tests for the behaviour the task describes, run them, and report.

- Find how the project already tests (framework, layout, naming, how to run) and follow it.
- Cover the behaviour asked for, its edge cases and its failure modes; each test checks one \
thing and fails if that thing breaks.
- Run the tests you wrote (and the neighbouring existing ones) with bash and read the output.
- Do not change the code under test to make a test pass unless the task says so; a failing \
test that exposes a bug is a finding: report it.
- Deliver the test files in `paths`; your summary says what is covered, the exact command you \
ran, how many passed and failed, and why each failure fails.
"""

GENERAL_INSTRUCTIONS = """\
Role: general. Carry out the task as written: multi-step research, analysis, or (in build \
mode) a change.

- Plan briefly, then work step by step; check your results as you go.
- In build mode, make the smallest change that does what was asked, keep the project's style, \
and check it (read it back; run it when you can).
- Deliver files the task asks for in `paths`, and put the essentials in your summary: what you \
did, what you found, what is left or uncertain.
"""

BUILTIN_ROLES: tuple[SubagentDefinition, ...] = (
    SubagentDefinition(
        type="explorer",
        description="Reads and searches the workspace to answer a question, citing paths and "
        "lines; changes nothing.",
        instructions=EXPLORER_INSTRUCTIONS,
        read_only=True,
    ),
    SubagentDefinition(
        type="reviewer",
        description="Reviews a change or a set of files and reports problems by severity with "
        "locations and fixes; changes nothing.",
        instructions=REVIEWER_INSTRUCTIONS,
        read_only=True,
    ),
    SubagentDefinition(
        type="verifier",
        description="Checks a change adversarially against what it was meant to do and ends "
        "with VERDICT: PASS|FAIL|PARTIAL; changes nothing.",
        instructions=VERIFIER_INSTRUCTIONS,
        read_only=True,
    ),
    SubagentDefinition(
        type="tester",
        description="Writes and runs tests for a behaviour and reports what passes and fails "
        "(build mode: it writes test files).",
        instructions=TESTER_INSTRUCTIONS,
        read_only=False,
    ),
    SubagentDefinition(
        type="general",
        description="General-purpose: multi-step research or analysis; with readOnly: false it "
        "may also change files and run commands.",
        instructions=GENERAL_INSTRUCTIONS,
        read_only=True,
    ),
)

BUILTIN_TYPES: tuple[str, ...] = tuple(d.type for d in BUILTIN_ROLES)


def builtin_registry() -> Registry:
    """A registry holding the five built-in roles."""
    return Registry(BUILTIN_ROLES)


# --- the roles in the form a child runs (`AgentDefinition`) ---------------------------------

ROLES: dict[str, AgentDefinition] = {d.type: d.to_wire() for d in BUILTIN_ROLES}


def role(name: str, *, read_only: bool | None = None) -> AgentDefinition:
    """A built-in role's wire definition; `read_only` overrides its default mode."""
    for d in BUILTIN_ROLES:
        if d.type == name:
            return d.to_wire(read_only=read_only)
    raise ValueError(_unknown(name))


def resolve_agent(agent: str | AgentDefinition) -> AgentDefinition:
    if isinstance(agent, AgentDefinition):
        return agent
    try:
        return ROLES[agent]
    except KeyError:
        raise ValueError(_unknown(agent)) from None


def _unknown(name: str) -> str:
    return f"unknown agent {name!r}; built-in roles: {', '.join(sorted(ROLES))}"
