"""A cold resume trusts no model string from the store with the user's key: every string it
would resolve from storage is re-checked against what the parent is configured with, and the
caller's own model always wins (pure: no process, no store)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.parent.agents.sessions import SpawnSettings
from tether.parent.agents.settings import AgentSpec, spec_from_stored
from tether.parent.models import unconfigured_base_url
from tether.protocol.messages import AgentDefinition

LISTENER = "http://127.0.0.1:4444/v1"


def test_a_base_url_is_trusted_only_where_the_environment_configures_it() -> None:
    assert unconfigured_base_url("openai:gpt-4o-mini", {}) is None
    assert unconfigured_base_url("openai:x@https://api.openai.com/v1/", {}) is None
    assert unconfigured_base_url(f"openai:x@{LISTENER}", {"OPENAI_BASE_URL": LISTENER}) is None
    assert unconfigured_base_url("anthropic:claude-3-5-sonnet@20240620", {}) is None
    assert unconfigured_base_url("scripted:/any/file.json", {}) is None
    why = unconfigured_base_url(f"openai:x@{LISTENER}", {})
    assert why is not None
    assert f"names the base URL {LISTENER}" in why and "OPENAI_API_KEY would be sent" in why
    other = unconfigured_base_url(f"anthropic:y@{LISTENER}", {"OPENAI_BASE_URL": LISTENER})
    assert other is not None and "ANTHROPIC_BASE_URL" in other


def test_credentials_in_a_stored_url_are_never_repeated() -> None:
    why = unconfigured_base_url("openai:x@http://user:s3cret@evil.example/v1?k=s3cret", {})
    assert why is not None and "s3cret" not in why and "http://evil.example/v1" in why


@given(st.sampled_from(["openai", "anthropic"]), st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True))
def test_any_url_but_the_configured_one_is_refused(scheme: str, host: str) -> None:
    env = {"OPENAI_BASE_URL": "https://models.internal/v1", "ANTHROPIC_BASE_URL": ""}
    configured = {"openai": "https://models.internal/v1", "anthropic": "https://api.anthropic.com"}
    url = f"https://{host}.example/v1"
    assert (unconfigured_base_url(f"{scheme}:m@{url}", env) is None) == (url == configured[scheme])
    assert unconfigured_base_url(f"{scheme}:m@{configured[scheme]}", env) is None


def resume(
    definition: AgentDefinition, stored_model: str | None, given: str | None = None
) -> AgentSpec | str:
    return spec_from_stored(definition, "/ws", SpawnSettings(model=stored_model), given)


@pytest.fixture(autouse=True)
def no_base_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_a_cold_resume_refuses_a_stored_model_that_would_send_the_key_elsewhere() -> None:
    plain = AgentDefinition(type="explorer", description="x")
    refused = resume(plain, f"openai:x@{LISTENER}")
    assert isinstance(refused, str) and refused.startswith("has a stored model that names")
    assert "resume it with the model you mean" in refused
    # The caller's own model is theirs: it wins, and the stored string is never read.
    given = resume(plain, f"openai:x@{LISTENER}", given=f"openai:x@{LISTENER}")
    assert isinstance(given, AgentSpec) and given.run.model == f"openai:x@{LISTENER}"
    assert isinstance(resume(plain, "openai:gpt-4o-mini"), AgentSpec)


def test_the_definitions_models_from_the_store_are_checked_too() -> None:
    named = AgentDefinition(type="explorer", description="x", model=f"openai:x@{LISTENER}")
    refused = resume(named, None)
    assert isinstance(refused, str) and refused.startswith("has a stored model that")
    # A given model replaces the definition's main model, not its compaction model.
    assert isinstance(resume(named, None, given="scripted:/f.json"), AgentSpec)
    compacting = AgentDefinition(
        type="explorer", description="x", compaction_model=f"anthropic:y@{LISTENER}"
    )
    refused = resume(compacting, "scripted:/f.json", given="scripted:/g.json")
    assert isinstance(refused, str) and refused.startswith("has a stored compaction model")
