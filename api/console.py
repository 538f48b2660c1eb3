"""What `tether`'s command line prints, for a program of your own: the plain progress lines
(`printer`), the live tree of an orchestration (`LiveView`), a run's result (`render_result`)
and an orchestration's outcome with its ledger (`render_orchestration`). Each strips control
characters from whatever a child or a model wrote."""

from __future__ import annotations

from tether.parent.cli.live import LiveView
from tether.parent.cli.orchestrate import render_orchestration
from tether.parent.cli.output import render as render_result
from tether.parent.cli.progress import printer

__all__ = ["LiveView", "printer", "render_orchestration", "render_result"]
