"""Model providers live in the parent: the child only ever asks through `model/complete`.

A provider answers one turn. `resolve_model("scripted:FILE")` builds one from a model string.
"""

from __future__ import annotations

from typing import Protocol

from tether.protocol.messages import ModelCompleteParams, ModelCompleteResult


class ModelProvider(Protocol):
    async def complete(self, params: ModelCompleteParams) -> ModelCompleteResult:
        """Answer one model turn, or raise `tether.protocol.RemoteError` to fail it."""
        ...


def resolve_model(spec: str) -> ModelProvider:
    """Build a provider from a model string such as `scripted:examples/todo.json`."""
    scheme, _, rest = spec.partition(":")
    if scheme == "scripted":
        from tether.parent.models.scripted import ScriptedModel

        if not rest:
            raise ValueError("scripted model needs a file: scripted:PATH")
        return ScriptedModel.from_file(rest)
    raise ValueError(f"unknown model {spec!r}; known: scripted:FILE")


__all__ = ["ModelProvider", "resolve_model"]
