"""Model providers live in the parent: the child only ever asks through `model/complete`.

A provider answers one turn. `resolve_model` builds one from a model string:

- `scripted:FILE` — a deterministic script of turns (`scripted.py`);
- `scripted:trace:FILE` — a run's trace answering as it answered then (`replay.py`);
- `openai:MODEL` or `openai:MODEL@BASE_URL` — any OpenAI-compatible Chat Completions server;
- `anthropic:MODEL` or `anthropic:MODEL@BASE_URL` — the Anthropic Messages API.

The HTTP providers read their base URL and key from the parent's environment (`OPENAI_*`,
`ANTHROPIC_*`); the child never sees either. See docs/models.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult


class ModelProvider(Protocol):
    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        """Answer one model turn, or raise `tether.protocol.RemoteError` to fail it."""
        ...


def resolve_model(spec: str) -> ModelProvider:
    """Build a provider from a model string such as `scripted:examples/todo.json` or
    `openai:gpt-4o-mini`. Raises `ValueError` for an unknown scheme or a missing name."""
    scheme, _, rest = spec.partition(":")
    if scheme == "scripted":
        from tether.parent.models.scripted import ScriptedModel

        if not rest:
            raise ValueError("scripted model needs a file: scripted:PATH")
        kind, _, trace = rest.partition(":")
        if kind == "trace":
            from tether.parent.models.replay import TraceModel

            if not trace:
                raise ValueError("a trace's replay needs a file: scripted:trace:PATH")
            return TraceModel.from_file(trace)
        return ScriptedModel.from_file(rest)
    if scheme == "openai":
        from tether.parent.models.openai import OpenAIModel

        return OpenAIModel.from_spec(rest)
    if scheme == "anthropic":
        from tether.parent.models.anthropic import AnthropicModel

        return AnthropicModel.from_spec(rest)
    raise ValueError(
        f"unknown model {spec!r}; known: scripted:FILE, scripted:trace:FILE, "
        "openai:MODEL[@BASE_URL], anthropic:MODEL[@BASE_URL]"
    )


def absolute_model(spec: str) -> str:
    """A model string that names the same model from any directory: a scripted file (a script
    or a trace) made absolute; any other string as it is."""
    scheme, _, rest = spec.partition(":")
    if scheme != "scripted" or not rest:
        return spec
    kind, _, trace = rest.partition(":")
    if kind == "trace" and trace:
        return f"scripted:trace:{Path(trace).resolve()}"
    return f"scripted:{Path(rest).resolve()}"


def unconfigured_base_url(spec: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why a model string this process did not get from its user (read back from storage) is
    not one it would use on its own: it names a base URL (`@BASE_URL`) other than the one the
    parent's environment configures for its scheme (`OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL`,
    else the API's own), and the key of that scheme would go there. `None` for a string
    without a base URL, with the configured one, or of a scheme that sends no key."""
    scheme, _, rest = spec.partition(":")
    if scheme not in ("openai", "anthropic"):
        return None
    from tether.parent.models._http import (
        HttpModel,
        check_base_url,
        display_url,
        split_model_spec,
    )
    from tether.parent.models.anthropic import AnthropicModel
    from tether.parent.models.openai import OpenAIModel

    Http: type[HttpModel] = OpenAIModel if scheme == "openai" else AnthropicModel

    try:
        _, base = split_model_spec(scheme, rest)
        named = None if base is None else check_base_url(scheme, base)
    except ValueError as exc:
        return str(exc)
    environ = os.environ if env is None else env
    configured = environ.get(Http.BASE_URL_ENV) or Http.DEFAULT_BASE_URL
    try:
        allowed = check_base_url(scheme, configured)
    except ValueError:
        allowed = None
    if named is None or named == allowed:
        return None
    return (
        f"names the base URL {display_url(named)}, not the one this process is configured "
        f"with ({Http.BASE_URL_ENV}, else {Http.DEFAULT_BASE_URL}); {Http.API_KEY_ENV} would "
        f"be sent there (to trust it, set {Http.BASE_URL_ENV} to it)"
    )


__all__ = ["ModelProvider", "absolute_model", "resolve_model", "unconfigured_base_url"]
