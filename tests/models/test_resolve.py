"""Model strings: what `resolve_model` accepts, what it refuses, and what it imports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tether.parent.models import resolve_model
from tether.parent.models._http import split_model_spec
from tether.parent.models.anthropic import AnthropicModel
from tether.parent.models.openai import OpenAIModel


def test_openai_strings_take_the_base_url_from_the_string_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a = resolve_model("openai:gpt-4o-mini")
    assert isinstance(a, OpenAIModel)
    assert (a.model, a.base_url) == ("gpt-4o-mini", "https://api.openai.com/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1/")
    b = resolve_model("openai:llama3.1:8b")
    assert isinstance(b, OpenAIModel)
    assert (b.model, b.base_url) == ("llama3.1:8b", "http://localhost:11434/v1")
    c = resolve_model("openai:Qwen/Qwen2.5-7B@http://127.0.0.1:8000/v1")
    assert isinstance(c, OpenAIModel)
    assert (c.model, c.base_url) == ("Qwen/Qwen2.5-7B", "http://127.0.0.1:8000/v1")


def test_anthropic_strings_default_to_the_public_api() -> None:
    a = resolve_model("anthropic:claude-sonnet-4-5")
    assert isinstance(a, AnthropicModel)
    assert (a.model, a.base_url) == ("claude-sonnet-4-5", "https://api.anthropic.com")


def test_an_at_sign_that_does_not_start_a_url_stays_in_the_model_name() -> None:
    assert split_model_spec("anthropic", "claude-3-5@20240620") == ("claude-3-5@20240620", None)
    assert split_model_spec("openai", "m@https://u:p@host/v1") == ("m", "https://u:p@host/v1")


@pytest.mark.parametrize(
    "spec",
    ["openai:", "anthropic:", "openai:@http://127.0.0.1:8000/v1", "gemini:pro", "gpt-4o", ""],
)
def test_bad_model_strings_raise_value_error_at_resolve_time(spec: str) -> None:
    with pytest.raises(ValueError):
        resolve_model(spec)


@pytest.mark.parametrize("name", ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"])
def test_a_base_url_that_is_not_http_raises_value_error_at_resolve_time(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "localhost:8000/v1")
    scheme = name.split("_")[0].lower()
    with pytest.raises(ValueError, match="http"):
        resolve_model(f"{scheme}:some-model")


def test_the_scripted_path_does_not_import_httpx() -> None:
    code = (
        "import sys, tempfile, os\n"
        "from tether.parent.models import resolve_model\n"
        "fd, p = tempfile.mkstemp(); os.write(fd, b'[]'); os.close(fd)\n"
        "resolve_model('scripted:' + p); os.unlink(p)\n"
        "assert 'httpx' not in sys.modules, 'httpx was imported'\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
