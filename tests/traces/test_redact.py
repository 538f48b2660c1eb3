"""No key and no capability token reaches a trace line, whatever text it hides in: as is,
inside a JSON string, or inside JSON text inside a string (a tool's result)."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from tether.parent.trace.format import Turn, TurnRequest, decode, encode
from tether.parent.trace.redact import MIN_SECRET, Redactor, format_words, parent_secrets
from tether.protocol.messages import ChatMessage, ModelCompleteResult, ToolCall, Usage

secrets = st.text(min_size=MIN_SECRET, max_size=40).filter(lambda s: s.strip() == s and s)
around = st.text(max_size=30)


def turn_with(text: str) -> Turn:
    """A model call that carries `text` everywhere a child or a model can put it."""
    return Turn(
        run_id="run-1",
        wall=1.5,
        mono=2.5,
        index=1,
        request=TurnRequest(
            messages=[
                ChatMessage(role="user", content=text),
                ChatMessage(role="tool", content=json.dumps({"out": text}), tool_call_id="c1"),
                ChatMessage(
                    role="tool",
                    content=json.dumps({"inner": json.dumps({"deep": text})}),
                    tool_call_id="c2",
                ),
            ]
        ),
        response=ModelCompleteResult(
            message=ChatMessage(
                role="assistant",
                content=text,
                tool_calls=[ToolCall(id="c3", name="bash", arguments={text: [text]})],
            ),
            usage=Usage(input_tokens=3),
        ),
    )


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    return []


def unwrapped(value: str) -> list[str]:
    """A string and, when it is JSON text, every string inside it (recursively)."""
    out = [value]
    try:
        inner = json.loads(value)
    except ValueError:
        return out
    for s in strings(inner):
        if s != value:
            out += unwrapped(s)
    return out


@settings(max_examples=300, deadline=None)
@given(secret=secrets, before=around, after=around)
def test_a_secret_is_redacted_wherever_it_hides_in_a_line(
    secret: str, before: str, after: str
) -> None:
    # A secret that every line holds by its very form (`assistan`) cannot be kept out of
    # one: see the test after this one.
    assume(secret.encode() not in encode(turn_with("")))
    assume(not any(secret in word for word in format_words()))
    line = encode(turn_with(before + secret + after))
    cleaned = Redactor([secret])(line)
    assert cleaned.endswith(b"\n")
    decode(cleaned)  # still a valid trace line
    assert secret.encode() not in cleaned
    assert msgspec.json.encode(secret)[1:-1] not in cleaned
    for text in strings(msgspec.json.decode(cleaned)):
        for found in unwrapped(text):
            assert secret not in found


@pytest.mark.parametrize("secret", ["assistan", "argument", "toolCalls", "end_turn"])
def test_a_secret_inside_the_formats_own_words_leaves_a_trace_line_and_is_redacted_in_text(
    secret: str,
) -> None:
    line = encode(turn_with(f"my key is {secret}, keep it"))
    cleaned = decode(Redactor([secret])(line))  # still a trace line: nothing raised
    assert isinstance(cleaned, Turn) and cleaned.response is not None
    message = cleaned.response.message
    assert message.role == "assistant" and message.content == "my key is [redacted], keep it"
    scrubbed = "my key is [redacted], keep it"
    assert [(c.name, c.arguments) for c in message.tool_calls] == [("bash", {scrubbed: [scrubbed]})]
    assert cleaned.request.messages[0].content == "my key is [redacted], keep it"


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), secret=secrets)
# The secret may be a word of the line's own structure (a key): then it is no line without it.
@example(text="", secret="argument")
def test_a_line_without_the_secret_is_left_as_it_is(text: str, secret: str) -> None:
    line = encode(turn_with(text))
    redacted = Redactor([secret])(line)
    original = msgspec.json.decode(line)
    if not any(secret in found for s in strings(original) for found in unwrapped(s)):
        assert msgspec.json.decode(redacted) == original


def test_a_short_value_is_not_treated_as_a_secret() -> None:
    line = encode(turn_with("the key is short"))
    assert Redactor(["short"])(line) == line


def test_the_parent_s_secrets_are_its_secret_looking_variables_and_auth_headers() -> None:
    class Provider:
        def headers(self) -> dict[str, str]:
            return {
                "authorization": "Bearer sk-live-abcdefgh",
                "x-api-key": "ak-123456789",
                "anthropic-version": "2023-06-01",
            }

    found = parent_secrets(
        {"OPENAI_API_KEY": "sk-env-123456", "HOME": "/home/someone", "GH_TOKEN": "ghp_x"},
        {"SERVICE_PASSWORD": "hunter2hunter2", "LANG": "C.UTF-8"},
        [Provider(), object()],
    )
    assert set(found) == {
        "sk-env-123456",
        "ghp_x",
        "hunter2hunter2",
        "Bearer sk-live-abcdefgh",
        "sk-live-abcdefgh",
        "ak-123456789",
    }
