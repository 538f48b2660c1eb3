"""A run's trace, set up from its plan: the header, and the secrets kept out of it.

The run handle makes one `RunTrace` (`tether.parent.trace`) per run that has a trace, opens it
before the run starts and closes it after the last result; its broker records every call in
it. See docs/traces.md.
"""

from __future__ import annotations

import os
import time

from tether.parent.process.wired import version
from tether.parent.run.plan import RunPlan
from tether.parent.trace.format import Header
from tether.parent.trace.recorder import RunTrace
from tether.parent.trace.redact import parent_secrets
from tether.protocol.messages import PROTOCOL_VERSION


def run_trace(plan: RunPlan) -> RunTrace | None:
    """The trace of a planned run, or `None` when it is not traced (nothing is opened yet)."""
    spec = plan.trace
    if spec is None:
        return None
    params = plan.params
    agent_id = plan.labels.get("agentId") or None
    header = Header(
        run_id=plan.run_id,
        wall=time.time(),
        mono=time.monotonic(),
        tether_version=version(),
        protocol_version=PROTOCOL_VERSION,
        parent_run_id=plan.parent_run,
        agent_id=agent_id,
        agent=plan.agent,
        definition=params.agent,
        prompt=params.prompt,
        description=params.description,
        history=params.history,
        parent_tools=params.parent_tools,
        workspace=params.workspace,
        model=plan.models.main_name,
        compaction_model=plan.models.compaction_name,
        provider=plan.provider,
        labels=dict(plan.labels),
        orchestration=dict(spec.orchestration) if spec.orchestration is not None else None,
    )
    providers = [p for p in (plan.models.main, plan.models.compaction) if p is not None]
    secrets = parent_secrets(os.environ, plan.config.env, providers)
    return RunTrace(spec, header, secrets)
